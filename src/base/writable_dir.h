// Whether a command will be able to write where a flag points, checked before the work starts (a run
// that trains for an hour and then cannot save has wasted the hour). A probe file is created and removed:
// access(2) is not enough, since root passes it on /proc, on read-only mounts and on full file systems.
#pragma once

#include <string>

namespace quill {

// `dir` will be written into, or created when missing: it must be a directory in which a file can be
// created, or, when it does not exist yet, its nearest existing ancestor must be. Otherwise throws
// quill::Error "FLAG VALUE: ..." naming the place and the reason. Leaves nothing behind.
void check_dir_writable(const std::string& flag, const std::string& value, const std::string& dir);

}  // namespace quill
