// Every data-parallel rank must train the same job. Ranks started with different rows, seeds, flags
// or configs would otherwise train silently on, each with its own idea of the "global" batch. Before
// training, the ranks compare digests of what defines the job (one all-gather of 8 bytes per field)
// and every rank stops with the same message naming the fields that differ.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "data/rows.h"
#include "model/config.h"
#include "ops/device_context.h"
#include "train/train_options.h"

namespace quill {

struct AgreementField {
  std::string name;   // as the user knows it: "--seed", "config", "rows"
  std::string value;  // its canonical text on this rank
};

// The fields that must be equal on every rank: the model config (as parsed, so a value that
// differs counts, not the spelling), the rows (manifest rows_sha256 and sizes) and every option
// that changes the numerics, the schedule or the outputs; the validation rows (valid_rows, null
// without --valid-rows) likewise.
std::vector<AgreementField> agreement_fields(const TrainOptions& options, const InklingConfig& config,
                                             const RowsReader& rows, const RowsReader* valid_rows = nullptr);

// From every rank's digests (rank-major, ranks x fields), the message naming what differs from
// rank 0, or nothing when all agree. `mine` gives this rank's values for the message.
std::optional<std::string> describe_disagreement(const std::vector<AgreementField>& mine, const std::vector<int64_t>& digests,
                                                 int ranks, int my_rank);

// The all-gather and the check; throws (on every rank alike) when the ranks disagree.
void check_ranks_agree(Comm& dp, const DeviceContext& ctx, const std::vector<AgreementField>& fields);

// The directories the ranks write into must be one and the same: rank 0 writes --out, every rank writes
// its checkpoint shard into --save. Ranks started with different ones (a launcher script that puts the
// rank into the path) would scatter one run over several directories. Compared as absolute paths,
// before anything is written; throws on every rank alike, naming the flag and both values. A simulated
// rank runs it too (its loopback world answers with its own paths), so that its collectives stay the
// real rank's.
void check_ranks_share_outputs(Comm& world, const DeviceContext& ctx, const TrainOptions& options);

// At a step boundary: the stop signal any rank received (the largest signal number; 0: none), the same
// on every rank, so that all stop at the same step though a signal may reach only some of them, or
// reach them at different moments (one all-reduce of 8 bytes over `world`; null: this rank alone).
int agreed_stop_signal(Comm* world, const DeviceContext& ctx, int mine);

}  // namespace quill
