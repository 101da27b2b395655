#include "data/rows_pipeline.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/error.h"
#include "data/build_timing.h"
#include "data/packing.h"
#include "base/progress.h"
#include "data/row_plan.h"
#include "data/rows.h"
#include "data/rows_parallel_writer.h"
#include "base/sha256_stream.h"

namespace quill {

namespace {

// Storage that grows without being zero-filled first (the assembled rows overwrite every
// element; a serial memset of each new window's rows would be serial work that grows with the
// output) and is never shrunk.
template <typename T>
class Scratch {
 public:
  T* get(size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<T[]>(n);
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

// One window's candidate rows, side by side. Three of them take turns, so that writing and
// hashing a window overlaps rendering the next ones (with one window of slack for when the
// writer thread falls behind); a window's rows are reused only after its job ran.
struct WindowRows {
  Scratch<uint32_t> tokens;
  Scratch<uint8_t> mask;
  uint64_t ticket = 0;
};

// Consecutive kept rows that are also side by side in the window's buffer: one write.
struct Run {
  int64_t row;       // the first row's index
  size_t candidate;  // and its candidate's
  size_t count;
};

// What assembling a candidate row found besides its supervised targets.
struct RowFacts {
  int64_t max_token = -1;
  int64_t bad_mask_at = -1;  // the first t with mask[t] > 1 (only a renderer bug could cause one)
};

// Copies candidate row `c` from its pieces into `tokens`/`mask` (T each) and counts what the
// manifest needs.
RowFacts assemble_row(RowPlanner::Candidate& c, const RowPlanner& planner, const std::vector<MaskedTokens>& slots,
                      size_t T, uint32_t* tokens, uint8_t* mask) {
  size_t at = 0;
  for (size_t p = c.first_piece; p < c.first_piece + c.pieces; ++p) {
    const RowPlanner::Piece& piece = planner.pieces()[p];
    const MaskedTokens& src = piece.slot == RowPlanner::kCarry ? planner.carry() : slots[static_cast<size_t>(piece.slot)];
    std::memcpy(tokens + at, src.tokens.data() + piece.begin, piece.length * sizeof(uint32_t));
    std::memcpy(mask + at, src.mask.data() + piece.begin, piece.length);
    at += piece.length;
  }
  QUILL_CHECK(at == T, "packing: a row of {} tokens assembled from pieces of {}", T, at);
  int64_t supervised = 0;
  uint32_t max_token = 0;
  uint8_t over = 0;
  for (size_t t = 1; t < T; ++t) supervised += mask[t] != 0;  // count_supervised_targets
  for (size_t t = 0; t < T; ++t) {
    max_token = std::max(max_token, tokens[t]);
    over |= static_cast<uint8_t>(mask[t] > 1);
  }
  c.supervised = supervised;
  RowFacts facts;
  facts.max_token = max_token;
  if (over) {
    for (size_t t = 0; t < T && facts.bad_mask_at < 0; ++t) {
      if (mask[t] > 1) facts.bad_mask_at = static_cast<int64_t>(t);
    }
  }
  return facts;
}

}  // namespace

namespace {

// Rows packed from the conversations `order` (indices before the permutation, in packing order),
// written and flushed under temporary names in out_dir; install() puts them in place.
struct PackedRows {
  std::unique_ptr<ParallelRowsWriter> writer;
  PackStats stats;
  int64_t supervised = 0, max_token = -1;
  std::string sha;
};

// The conversations `order` rendered, packed into rows of options.row_tokens (at most max_rows; < 0:
// no limit) and written to out_dir's temporaries. `what` names the rows in the progress display and in
// the error when they make no row.
PackedRows pack_in_order(const RowsSource& source, std::span<const int64_t> order, int64_t max_rows,
                         const BuildOptions& options, const std::string& out_dir, ThreadPool& pool,
                         const std::string& what) {
  BuildTiming* timing = options.timing;
  const int64_t n = source.conversations;
  PackedRows packed;
  packed.writer = std::make_unique<ParallelRowsWriter>(out_dir, options.row_tokens);  // checks row_tokens first
  ParallelRowsWriter& writer = *packed.writer;
  RowPlanner planner(PackOptions{options.seed, options.row_tokens, max_rows}, n);
  const size_t T = static_cast<size_t>(options.row_tokens);
  std::array<WindowRows, 3> windows;
  // Writes and hashes each window's kept rows, in order, while the pool renders the next window.
  // One thread is enough for the writes: the file's page cache takes one writer at a time
  // (ext4 serialises buffered writes to a file; pwrite from two threads measured no faster here).
  // A build on one thread does it on that thread (so that one thread means one).
  // Declared after what its jobs use: destroyed (and drained) first.
  const bool writer_thread = pool.threads() > 1;
  BackgroundSha256 background(writer_thread);

  // Windows of about 128 conversations a thread: the serial steps between the parallel ones cost
  // O(conversations + rows), so the windows can be small enough to keep memory low. From half
  // the total on, each window is half of what is left, down to 16 a thread.
  const size_t threads = static_cast<size_t>(pool.threads());
  const size_t full = std::max<size_t>(512, threads * 128), smallest = std::max<size_t>(64, threads * 16);
  std::vector<MaskedTokens> slots;  // kept from window to window: their storage is reused
  std::vector<size_t> sizes;
  std::vector<RowFacts> facts;
  int64_t supervised = 0, max_token = -1, rendered = 0, bytes_done = 0;
  const int64_t total = static_cast<int64_t>(order.size());
  Progress progress(what.empty() ? "data build: rendering" : "data build: rendering the held-out split",
                    ProgressOptions::counting(options.progress, max_rows > 0 ? "rows" : "conversations"));
  size_t start = 0, which = 0;
  while (start < order.size() && !planner.done()) {
    const size_t left = order.size() - start;
    const size_t count = std::min({left, full, std::max(smallest, (left + 1) / 2)});
    if (slots.size() < count) slots.resize(count);
    PhaseTimer render_timer(timing, "render (parse + render + tokenize)", false);
    pool.parallel_for(count, [&](size_t i) {
      // Rendered with the vectors' headers on this thread's stack: appending to slots[i] in place
      // writes its end pointer for every token, in a cache line the neighbouring slots (other
      // threads) write too (false sharing: half the speed on 2 threads).
      MaskedTokens out = std::move(slots[i]);
      source.render(order[start + i], out);
      slots[i] = std::move(out);
    });
    render_timer.stop();
    if (source.after_window) source.after_window();

    PhaseTimer lay_timer(timing, "lay out and decide rows", true);
    sizes.resize(count);
    for (size_t i = 0; i < count; ++i) {
      QUILL_CHECK(slots[i].tokens.size() == slots[i].mask.size(), "packing: conversation {} has {} tokens but {} mask bits",
                  order[start + i], slots[i].tokens.size(), slots[i].mask.size());
      sizes[i] = slots[i].tokens.size();
    }
    planner.lay_out({order.data() + start, count}, sizes);
    std::vector<RowPlanner::Candidate>& cands = planner.candidates();
    lay_timer.stop();

    WindowRows& win = windows[which];
    which = (which + 1) % windows.size();
    PhaseTimer wait_timer(timing, "wait for the writer thread", true);
    if (win.ticket) background.wait(win.ticket);
    wait_timer.stop();
    uint32_t* row_tokens = win.tokens.get(cands.size() * T);
    uint8_t* row_mask = win.mask.get(cands.size() * T);
    facts.resize(cands.size());
    PhaseTimer assemble_timer(timing, "assemble rows", false);
    pool.parallel_for(cands.size(), [&](size_t c) {
      facts[c] = assemble_row(cands[c], planner, slots, T, row_tokens + c * T, row_mask + c * T);
    });
    assemble_timer.stop();

    PhaseTimer decide_timer(timing, "lay out and decide rows", true);
    const size_t taken = planner.decide();
    std::vector<Run> runs;
    size_t kept = 0;
    for (size_t c = 0; c < cands.size(); ++c) {
      if (cands[c].row < 0) continue;
      if (facts[c].bad_mask_at >= 0) {
        QUILL_FAIL("{}: row {} mask[{}] is {}, expected 0 or 1", out_dir, cands[c].row, facts[c].bad_mask_at,
                   row_mask[c * T + static_cast<size_t>(facts[c].bad_mask_at)]);
      }
      supervised += cands[c].supervised;
      max_token = std::max(max_token, facts[c].max_token);
      ++kept;
      // Kept candidates side by side are consecutive rows: one write for the run.
      if (!runs.empty() && runs.back().candidate + runs.back().count == c) {
        ++runs.back().count;
      } else {
        runs.push_back({cands[c].row, c, 1});
      }
    }
    decide_timer.stop();

    if (kept > 0) {
      // Queued, the job's time is the writer thread's; on one thread it is this phase.
      PhaseTimer push_timer(writer_thread ? nullptr : timing, "write + hash rows (one thread)", true);
      win.ticket = background.push([&writer, timing, row_tokens, row_mask, T, kept, runs = std::move(runs)](Sha256& sha) {
        // A few rows at a time, hashed and then written while they are still in the cache
        // (hashing a window, then writing it from memory, measured 0.09-0.12 s of writing per
        // 92 MB here; written row by row as the serial packer did, 0.055 s).
        const size_t step = std::max<size_t>(1, (size_t{256} << 10) / (5 * T));
        for (const Run& run : runs) {
          for (size_t done = 0; done < run.count; done += step) {
            const size_t k = std::min(step, run.count - done), c = run.candidate + done;
            WorkTimer hash_timer(timing, BuildTiming::kHash);
            for (size_t r = c; r < c + k; ++r) {
              sha.update(row_tokens + r * T, T * sizeof(uint32_t));
              sha.update(row_mask + r * T, T);
            }
            hash_timer.stop();
            WorkTimer write_timer(timing, BuildTiming::kWrite);
            writer.write(run.row + static_cast<int64_t>(done), static_cast<int64_t>(k), row_tokens + c * T,
                         row_mask + c * T);
          }
        }
        writer.start_writeback(runs.front().row, static_cast<int64_t>(kept));
      });
    }

    PhaseTimer carry_timer(timing, "lay out and decide rows", true);
    planner.end_window({slots.data(), count});
    carry_timer.stop();
    for (size_t i = 0; i < taken; ++i) bytes_done += source.bytes(order[start + i]);
    rendered += static_cast<int64_t>(taken);
    start += count;
    if (planner.done() || start >= order.size()) break;  // the final line follows
    progress.set_bytes(bytes_done);
    if (max_rows > 0) {
      progress.update(planner.rows(), max_rows, fmt::format("conversations {}/{}", rendered, total));
    } else {
      progress.update(rendered, total, fmt::format("rows {}", planner.rows()));
    }
  }
  // The final figures, for the closing line (shown when the build showed any).
  progress.set_bytes(bytes_done);
  progress.update(max_rows > 0 ? planner.rows() : rendered, max_rows > 0 ? max_rows : total,
                  fmt::format("rows {}", planner.rows()));
  progress.finish();
  if (source.before_finish) source.before_finish({order.data() + start, order.size() - start});
  PackStats stats = planner.finish();
  // The planner counts every conversation of the input; these rows' are those of `order`.
  stats.conversations = total;
  stats.conversations_skipped = total - stats.conversations_used;
  QUILL_CHECK(stats.rows > 0,
              "{}: no rows: {} conversations{} give {} tokens, which make no row of {} tokens with a supervised target",
              out_dir, stats.conversations, what, stats.stream_tokens, options.row_tokens);

  PhaseTimer hash_timer(timing, "wait for the writer thread", true);
  packed.sha = background.hex();  // every row written and hashed
  hash_timer.stop();
  writer.close_file(stats.rows, timing);
  packed.stats = stats;
  packed.supervised = supervised;
  packed.max_token = max_token;
  return packed;
}

// Renames the rows into place and writes their manifest (extras: as build_rows_from_source's).
nlohmann::json install_packed(PackedRows& packed, const BuildOptions& options, nlohmann::json extras) {
  int64_t invalid = extras.value("invalid_skipped", int64_t{0});
  extras.erase("invalid_skipped");
  extras.update(packed.stats.to_manifest());
  extras["conversations"]["invalid_skipped"] = invalid;
  return packed.writer->install({packed.stats.rows, options.row_tokens, packed.supervised, packed.max_token, packed.sha},
                                extras);
}

// A build without a split leaves no held-out rows of an earlier build beside its own.
void remove_stale_valid_split(const std::string& valid_dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(fs::path(valid_dir) / "manifest.json")) return;
  std::error_code ec;
  for (const char* name : {"manifest.json", kRowsFile}) fs::remove(fs::path(valid_dir) / name, ec);
  fs::remove(valid_dir, ec);  // only when empty
}

}  // namespace

void check_valid_fraction(double fraction) {
  QUILL_CHECK(std::isfinite(fraction) && fraction >= 0 && fraction < 1,
              "--valid-fraction {}: must be in [0, 1) (the share of the conversations held out)", fraction);
}

int64_t held_out_conversations(int64_t conversations, double valid_fraction) {
  check_valid_fraction(valid_fraction);
  return static_cast<int64_t>(std::floor(valid_fraction * static_cast<double>(conversations)));
}

nlohmann::json build_rows_from_source(const RowsSource& source, const ChatRenderer& renderer,
                                      const BuildOptions& options, const std::string& out_dir, nlohmann::json extras,
                                      ThreadPool& pool) {
  const Tokenizer& tokenizer = renderer.tokenizer();
  nlohmann::json tok = {{"name", tokenizer.name()}, {"sha256", tokenizer.definition_sha256()},
                        {"vocab_size", tokenizer.vocab_size()}};
  if (options.tokenizer_source.is_object()) tok.update(options.tokenizer_source);
  extras["tokenizer"] = tok;
  extras["renderer"] = kRendererName;
  extras["renderer_version"] = kRendererVersion;
  extras["template_kwargs"] = renderer.template_kwargs();
  extras["source"] = options.source;
  extras["seed"] = options.seed;
  extras["max_rows"] = options.max_rows;

  const int64_t n = source.conversations;
  const int64_t held = held_out_conversations(n, options.valid_fraction);
  QUILL_CHECK(options.valid_fraction == 0 || held > 0,
              "--valid-fraction {}: of {} conversations that holds out none (floor({} x {}) = 0); give a larger fraction",
              options.valid_fraction, n, options.valid_fraction, n);
  PhaseTimer perm_timer(options.timing, "permutation", true);
  std::vector<int64_t> perm = fisher_yates_permutation(n, options.seed);
  perm_timer.stop();

  // The held-out conversations are the permutation's last `held`: a seeded uniform sample, fixed before
  // anything is rendered and whatever --max-rows is; the training rows are packed from the others.
  const std::string valid_dir = (std::filesystem::path(out_dir) / kValidSplitDir).string();
  const std::span<const int64_t> train_order(perm.data(), static_cast<size_t>(n - held));
  PackedRows train = pack_in_order(source, train_order, options.max_rows, options, out_dir, pool, "");
  if (held == 0) {
    nlohmann::json manifest = install_packed(train, options, extras);
    remove_stale_valid_split(valid_dir);
    return manifest;
  }
  const std::span<const int64_t> valid_order(perm.data() + (n - held), static_cast<size_t>(held));
  PackedRows valid = pack_in_order(source, valid_order, -1, options, valid_dir, pool,
                                   fmt::format(" held out by --valid-fraction {}", options.valid_fraction));
  // Both finished before either is installed; the held-out rows first, so that training rows whose
  // manifest names a split are never beside an older one.
  PhaseTimer install_timer(options.timing, "rename + manifest", true);
  nlohmann::json valid_extras = extras;
  valid_extras["max_rows"] = -1;
  valid_extras["split"] = {{"role", "validation"}, {"valid_fraction", options.valid_fraction},
                           {"held_out_conversations", held}, {"of_conversations", n}};
  const nlohmann::json valid_manifest = install_packed(valid, options, valid_extras);
  extras["split"] = {{"role", "training"},
                     {"valid_fraction", options.valid_fraction},
                     {"held_out_conversations", held},
                     {"of_conversations", n},
                     {"valid_dir", kValidSplitDir},
                     {"valid_rows", valid_manifest.at("rows")},
                     {"valid_rows_sha256", valid_manifest.at("rows_sha256")}};
  return install_packed(train, options, extras);
}

}  // namespace quill
