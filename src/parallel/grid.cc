// Rank arithmetic of the parallel grid; see grid.h for the layout rules.
#include "parallel/grid.h"

#include <algorithm>

#include "base/error.h"

namespace quill {

namespace {

const std::vector<std::string> kAxisNames = {"tp", "cp", "ep", "dp", "pp"};

std::vector<std::string> split_order(const std::string& order) {
  std::vector<std::string> tokens;
  size_t begin = 0;
  while (true) {
    size_t end = order.find('-', begin);
    tokens.push_back(order.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  for (const std::string& t : tokens) {
    QUILL_CHECK(!t.empty(), "grid: order '{}' has an empty axis name (write axes joined by '-', e.g. tp-cp-ep-dp-pp)", order);
    QUILL_CHECK(std::find(kAxisNames.begin(), kAxisNames.end(), t) != kAxisNames.end(),
                "grid: order '{}' has unknown axis '{}' (the axes are tp, cp, ep, dp, pp)", order, t);
    QUILL_CHECK(std::count(tokens.begin(), tokens.end(), t) == 1, "grid: order '{}' names axis '{}' twice", order, t);
  }
  return tokens;
}

// One layout: the order's axes minus `dropped`, each token renamed and sized by `specs`; an axis
// the order leaves out is appended (Megatron does the same), which is harmless only at size 1.
struct AxisSpec {
  std::string token, name, role;  // role names the size in messages: "tp", "etp", "edp (derived)"
  int size;
};

Grid::Axes make_axes(const std::vector<std::string>& tokens, const std::string& order, const std::string& dropped,
                     const std::vector<AxisSpec>& specs) {
  Grid::Axes axes;
  auto add = [&](const AxisSpec& s) {
    axes.names.push_back(s.name);
    axes.sizes.push_back(s.size);
  };
  for (const std::string& t : tokens) {
    if (t == dropped) continue;
    for (const AxisSpec& s : specs)
      if (s.token == t) add(s);
  }
  for (const AxisSpec& s : specs) {
    if (std::find(tokens.begin(), tokens.end(), s.token) != tokens.end()) continue;
    QUILL_CHECK(s.size == 1, "grid: order '{}' leaves out axis '{}', but {} is {}; an axis may be left out only when its size is 1",
                order, s.token, s.role, s.size);
    add(s);
  }
  return axes;
}

std::vector<int> strides_of(const Grid::Axes& axes) {
  std::vector<int> strides(axes.sizes.size());
  int s = 1;
  for (size_t i = 0; i < axes.sizes.size(); ++i) {
    strides[i] = s;
    s *= axes.sizes[i];
  }
  return strides;
}

std::vector<int> mask_of(const Grid::Axes& axes, const std::vector<std::string>& names) {
  std::vector<int> masked;
  for (size_t i = 0; i < axes.names.size(); ++i)
    if (std::find(names.begin(), names.end(), axes.names[i]) != names.end()) masked.push_back(static_cast<int>(i));
  return masked;
}

// The group of `rank` spanning the axes `names` of a layout: the ranks that agree with it on
// every other axis. Its coordinates on the spanned axes vary, first axis fastest, so the ranks
// come out ascending (strides grow along the order) and the index is a mixed-radix count.
RankGroup group_in(const Grid::Axes& axes, const std::vector<std::string>& names, int rank) {
  const std::vector<int> strides = strides_of(axes);
  const std::vector<int> masked = mask_of(axes, names);
  int base = rank, group_size = 1, index = 0;
  for (int m : masked) {
    const int c = (rank / strides[m]) % axes.sizes[m];
    base -= c * strides[m];
    index += c * group_size;
    group_size *= axes.sizes[m];
  }
  RankGroup g;
  g.index = index;
  g.ranks.reserve(group_size);
  for (int i = 0; i < group_size; ++i) {
    int r = base, rest = i;
    for (int m : masked) {
      r += (rest % axes.sizes[m]) * strides[m];
      rest /= axes.sizes[m];
    }
    g.ranks.push_back(r);
  }
  return g;
}

bool is_expert(GroupKind kind) { return kind >= GroupKind::EP; }

// Axis names (of the layout that serves `kind`) that a group of `kind` spans.
std::vector<std::string> axes_of(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return {"tp"};
    case GroupKind::CP: return {"cp"};
    case GroupKind::DP: return {"dp"};
    case GroupKind::PP: return {"pp"};
    case GroupKind::TP_CP: return {"tp", "cp"};
    case GroupKind::DP_CP: return {"dp", "cp"};
    case GroupKind::TP_DP: return {"tp", "dp"};
    case GroupKind::TP_DP_CP: return {"tp", "dp", "cp"};
    case GroupKind::MP: return {"tp", "pp"};
    case GroupKind::EP: return {"ep"};
    case GroupKind::ETP: return {"etp"};
    case GroupKind::EDP: return {"edp"};
    case GroupKind::ETP_EP: return {"etp", "ep"};
    case GroupKind::ETP_EP_PP: return {"etp", "ep", "pp"};
  }
  return {};
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : "-") + n;
  return s;
}

}  // namespace

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return "tp";
    case GroupKind::CP: return "cp";
    case GroupKind::DP: return "dp";
    case GroupKind::PP: return "pp";
    case GroupKind::TP_CP: return "tp-cp";
    case GroupKind::DP_CP: return "dp-cp";
    case GroupKind::TP_DP: return "tp-dp";
    case GroupKind::TP_DP_CP: return "tp-dp-cp";
    case GroupKind::MP: return "mp";
    case GroupKind::EP: return "ep";
    case GroupKind::ETP: return "etp";
    case GroupKind::EDP: return "edp";
    case GroupKind::ETP_EP: return "etp-ep";
    case GroupKind::ETP_EP_PP: return "etp-ep-pp";
  }
  return "?";
}

std::vector<GroupKind> all_group_kinds() {
  return {GroupKind::TP,    GroupKind::CP,       GroupKind::DP, GroupKind::PP,  GroupKind::TP_CP,
          GroupKind::DP_CP, GroupKind::TP_DP,    GroupKind::TP_DP_CP, GroupKind::MP, GroupKind::EP,
          GroupKind::ETP,   GroupKind::EDP,      GroupKind::ETP_EP, GroupKind::ETP_EP_PP};
}

Grid::Grid(int world, LayoutSpec sizes) : world_(world), sizes_(std::move(sizes)) {
  const LayoutSpec& s = sizes_;
  QUILL_CHECK(world >= 1, "grid: world size must be at least 1 (got {})", world);
  for (auto [name, v] : {std::pair{"tp", s.tp}, {"cp", s.cp}, {"dp", s.dp}, {"pp", s.pp}, {"ep", s.ep}, {"etp", s.etp}})
    QUILL_CHECK(v >= 1, "grid: {} must be at least 1 (got {})", name, v);
  const std::vector<std::string> tokens = split_order(s.order);
  dense_ = make_axes(tokens, s.order, "ep",
                     {{"tp", "tp", "tp", s.tp}, {"cp", "cp", "cp", s.cp}, {"dp", "dp", "dp", s.dp}, {"pp", "pp", "pp", s.pp}});

  const long dense = 1L * s.tp * s.cp * s.dp * s.pp;
  QUILL_CHECK(dense == world, "grid: world size {} must equal tp*cp*dp*pp = {}*{}*{}*{} = {} (every rank holds exactly one "
              "piece of the dense layers)", world, s.tp, s.cp, s.dp, s.pp, dense);
  const long expert_model = 1L * s.etp * s.ep * s.pp;
  QUILL_CHECK(world % expert_model == 0, "grid: etp*ep*pp = {}*{}*{} = {} must divide the world size {} (equivalently etp*ep = {} "
              "must divide tp*cp*dp = {}), so that expert data parallelism edp = world/(etp*ep*pp) is whole",
              s.etp, s.ep, s.pp, expert_model, world, s.etp * s.ep, s.tp * s.cp * s.dp);
  edp_ = static_cast<int>(world / expert_model);
  QUILL_CHECK(s.pp == 1 || tokens.back() == "pp" || edp_ == s.dp,
              "grid: with pp = {} and order '{}' not ending in pp, expert data parallelism edp = world/(etp*ep*pp) = {} must "
              "equal dp = {} (Megatron's rule: otherwise dense and expert layers would place pipeline stages differently)",
              s.pp, s.order, edp_, s.dp);

  expert_ = make_axes(tokens, s.order, "cp",
                      {{"tp", "etp", "etp", s.etp}, {"ep", "ep", "ep", s.ep}, {"dp", "edp", "edp (world/(etp*ep*pp))", edp_},
                       {"pp", "pp", "pp", s.pp}});
  for (int r = 0; r < world_; ++r)
    QUILL_CHECK(group_in(dense_, {"pp"}, r).ranks == group_in(expert_, {"pp"}, r).ranks,
                "grid: rank {}'s pipeline group differs between dense layers ({}) and expert layers ({}); dense and expert "
                "layers must share pipeline stages", r, dense_order(), expert_order());
}

const Grid::Axes& Grid::axes_for(GroupKind kind) const { return is_expert(kind) ? expert_ : dense_; }

std::string Grid::dense_order() const { return join(dense_.names); }
std::string Grid::expert_order() const { return join(expert_.names); }

RankGroup Grid::group(GroupKind kind, int rank) const {
  QUILL_CHECK(rank >= 0 && rank < world_, "grid: rank {} is outside the world of {} ranks", rank, world_);
  return group_in(axes_for(kind), axes_of(kind), rank);
}

std::vector<std::vector<int>> Grid::groups(GroupKind kind) const {
  std::vector<std::vector<int>> all;
  for (int r = 0; r < world_; ++r) {
    RankGroup g = group(kind, r);
    if (g.index == 0) all.push_back(std::move(g.ranks));  // each group once, at its first rank
  }
  return all;
}

GridCoords Grid::coords(int rank) const {
  GridCoords c;
  c.tp = group(GroupKind::TP, rank).index;
  c.cp = group(GroupKind::CP, rank).index;
  c.dp = group(GroupKind::DP, rank).index;
  c.pp = group(GroupKind::PP, rank).index;
  c.ep = group(GroupKind::EP, rank).index;
  c.etp = group(GroupKind::ETP, rank).index;
  c.edp = group(GroupKind::EDP, rank).index;
  return c;
}

std::string Grid::describe() const {
  const LayoutSpec& s = sizes_;
  return fmt::format("world {}: tp {} cp {} dp {} pp {} | ep {} etp {} edp {} | order {}", world_, s.tp, s.cp, s.dp, s.pp, s.ep,
                     s.etp, edp_, s.order);
}

}  // namespace quill
