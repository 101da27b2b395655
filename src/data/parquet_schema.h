// A Parquet file's schema as leaf columns (parquet-format README, "Nested Encoding"): the
// footer's SchemaElement list is the schema tree depth first (each group followed by its
// num_children children); every leaf is one column chunk per row group, in this order. For each
// leaf the reader needs the nodes on its path and what its definition and repetition levels
// mean: a node's definition level is the number of OPTIONAL or REPEATED nodes from the top down
// to and including it, so a value whose definition level is d has every node of level <= d
// present and the next one below null (an OPTIONAL node) or empty (a REPEATED one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/parquet_metadata.h"

namespace quill {

struct ParquetPathNode {
  std::string name;
  ParquetRepetition repetition = ParquetRepetition::kRequired;
  int def_level = 0;  // as above
  int rep_level = 0;  // REPEATED nodes from the top down to and including it
};

struct ParquetLeaf {
  std::string dotted;                 // "messages.list.element.content"
  std::vector<ParquetPathNode> path;  // the top-level field first, the leaf last
  ParquetType type = ParquetType::kBoolean;
  int max_def = 0;
  int max_rep = 0;
  int index = 0;  // the column's position in each row group
};

// The leaves of the schema, in column order; errors (a malformed tree, an unknown repetition)
// start with `what`.
std::vector<ParquetLeaf> parquet_leaves(const std::vector<ParquetSchemaElement>& schema, const std::string& what);

}  // namespace quill
