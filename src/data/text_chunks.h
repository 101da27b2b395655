// Where a text may be cut for parallel encoding, and the chunks encode_parallel gives its threads.
//
// A cut point is a position p (0 < p < size) with text[p-1] == '\n' and text[p] an ASCII letter
// or digit. No piece of the o200k or GPT-2 pattern contains that pair (letters never follow a
// newline inside a piece, punctuation pieces end in [\r\n/]*, whitespace pieces stop before a
// non-space), so the pieces of the parts are the pieces of the whole; and since the cut is ASCII,
// no UTF-8 sequence (well- or ill-formed) spans it.
//
// The chunks: the text is divided into intervals of `chunk_bytes`; chunk j begins at the first cut
// point inside interval j (chunk 0 at 0) and ends where the next nonempty chunk begins, or at the
// end. A chunk whose interval holds no cut point is empty (its bytes belong to the chunk before).
// Chunk j is found from the text alone, reading its own interval and then forward to the next cut
// point, so each thread finds the chunks it encodes (v7: no serial pass over the text) and the
// chunks depend only on the text and chunk_bytes, never on the thread that finds them.
#pragma once

#include <cstddef>
#include <string_view>

namespace quill {

struct TextChunk {
  size_t begin = 0, end = 0;  // [begin, end); empty when begin == end
};

// The number of intervals (and chunks): ceil(size / chunk_bytes); chunk_bytes > 0.
size_t chunk_count(size_t text_size, size_t chunk_bytes);
// Chunk j (< chunk_count) of `text`.
TextChunk text_chunk(std::string_view text, size_t chunk_bytes, size_t j);
// The first cut point p with from <= p < to, or `to` when there is none.
size_t first_cut_point(std::string_view text, size_t from, size_t to);

}  // namespace quill
