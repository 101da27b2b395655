// How `quill tune` prints a ranked layout (a table row, the JSON entry), shared by the modelled ranking
// (cli/cmd_tune.cc) and the measured one (cli/tune_measure.h). Every entry says where its compute came
// from (tune::StageComputeSource: modelled, measured, scaled); communication is always modelled.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tune/rank_layouts.h"

namespace quill::cli {

std::string gib_text(int64_t bytes);                       // "126.5" (GiB, one decimal)
std::string optimizer_text(const OptimizerMemory& memory); // "offload 0.1, bf16 moments"
std::string recompute_text(const RecomputeOptions& recompute);  // "none", "block 3", "uniform 1"
// What the candidate does to fit besides its layout: "offload 0, bf16 moments, recompute block 3".
std::string memory_settings_text(const tune::Candidate& candidate);
// "modelled", or "measured (stages 0,1,3; 2 scaled)".
std::string compute_source_text(const tune::RankedLayout& ranked);

// The table's header and one row; with `compute_column` the compute's source after the layout's figures.
std::string ranked_header(bool compute_column);
std::string ranked_row(const tune::RankedLayout& ranked, int rank, bool compute_column);

// The JSON entry: the layout, its optimizer memory and recompute, per stage the plan's peaks, the projected times and
// the compute's source, the step, tokens/s/GPU, MFU, $/M tokens, what bounds it.
nlohmann::json ranked_json(const tune::RankedLayout& ranked, int rank);

}  // namespace quill::cli
