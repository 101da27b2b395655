#include "data/parquet_schema.h"

#include "base/error.h"

namespace quill {

namespace {

// Depth-first walk of the flattened tree from schema[at], with `path` holding the ancestors.
class LeafWalker {
 public:
  LeafWalker(const std::vector<ParquetSchemaElement>& schema, const std::string& what) : schema_(schema), what_(what) {}

  std::vector<ParquetLeaf> run() {
    QUILL_CHECK(!schema_.empty(), "{}: the schema is empty", what_);
    const ParquetSchemaElement& root = schema_[0];
    QUILL_CHECK(root.num_children >= 0, "{}: the schema root has {} children", what_, root.num_children);
    size_t at = 1;
    for (int32_t c = 0; c < root.num_children; ++c) walk(at, 1);
    QUILL_CHECK(at == schema_.size(), "{}: the schema tree ends after {} of its {} elements", what_, at, schema_.size());
    return std::move(leaves_);
  }

 private:
  void walk(size_t& at, int depth) {
    QUILL_CHECK(at < schema_.size(), "{}: the schema tree promises more elements than the {} it has", what_,
                schema_.size());
    QUILL_CHECK(depth <= 64, "{}: the schema nests deeper than 64 levels", what_);
    const ParquetSchemaElement& e = schema_[at++];
    QUILL_CHECK(e.repetition.has_value(), "{}: schema element '{}' has no repetition type", what_, e.name);
    int r = static_cast<int>(*e.repetition);
    QUILL_CHECK(r >= 0 && r <= 2, "{}: schema element '{}' has repetition type {}", what_, e.name, r);
    ParquetPathNode node;
    node.name = e.name;
    node.repetition = *e.repetition;
    int parent_def = path_.empty() ? 0 : path_.back().def_level;
    int parent_rep = path_.empty() ? 0 : path_.back().rep_level;
    node.def_level = parent_def + (node.repetition == ParquetRepetition::kRequired ? 0 : 1);
    node.rep_level = parent_rep + (node.repetition == ParquetRepetition::kRepeated ? 1 : 0);
    path_.push_back(node);
    if (e.num_children > 0) {
      QUILL_CHECK(!e.type.has_value(), "{}: schema element '{}' has both a type and children", what_, e.name);
      for (int32_t c = 0; c < e.num_children; ++c) walk(at, depth + 1);
    } else {
      QUILL_CHECK(e.type.has_value(), "{}: schema element '{}' is neither a group nor typed", what_, e.name);
      ParquetLeaf leaf;
      leaf.path = path_;
      for (const ParquetPathNode& n : path_) leaf.dotted += (leaf.dotted.empty() ? "" : ".") + n.name;
      leaf.type = *e.type;
      leaf.max_def = node.def_level;
      leaf.max_rep = node.rep_level;
      leaf.index = static_cast<int>(leaves_.size());
      leaves_.push_back(std::move(leaf));
    }
    path_.pop_back();
  }

  const std::vector<ParquetSchemaElement>& schema_;
  const std::string& what_;
  std::vector<ParquetPathNode> path_;
  std::vector<ParquetLeaf> leaves_;
};

}  // namespace

std::vector<ParquetLeaf> parquet_leaves(const std::vector<ParquetSchemaElement>& schema, const std::string& what) {
  return LeafWalker(schema, what).run();
}

}  // namespace quill
