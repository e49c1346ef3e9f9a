// Files that come from users: what may be opened as data.
//
// Opening a FIFO blocks until a writer appears (forever, for a file named x.nii.gz that is a pipe), and a
// device or a socket is no data file either, so every path a user names is checked with a stat() before
// anything opens it. Folders are refused where a file is expected (reading one gives errors that name
// the wrong problem, such as "not valid JSON at byte 1").
//
//   require_regular_file(path, "experiment file");   // throws: "… is a FIFO (named pipe), not a file …"
//   if (file_kind(path) == FileKind::Folder) { ... a DICOM series ... }
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

enum class FileKind { Missing, Regular, Folder, Fifo, Socket, BlockDevice, CharacterDevice, Other };

// Follows symbolic links (a link to a regular file is a regular file).
FileKind file_kind(const std::filesystem::path& path);
std::string_view file_kind_name(FileKind kind);  // "a FIFO (named pipe)", "a folder", ...

// Throws a bad-input tessera::Error unless `path` is an existing regular file. `what` names its role
// in the message ("experiment file", "volume", "checkpoint").
void require_regular_file(const std::filesystem::path& path, std::string_view what);

// The whole of a regular file as text (require_regular_file first); throws a bad-input error naming
// the file and the system's reason when it cannot be read.
std::string read_user_text_file(const std::filesystem::path& path, std::string_view what);

// `path` with every character a terminal would not show written as \xNN: for messages about names
// that hold control characters (a NUL, an escape sequence).
std::string printable_path(std::string_view path);

// Throws a bad-input error when `text`, meant as a path (`what` names the field), holds a NUL or
// another control character: the operating system would cut the name at the NUL and create or open
// another file than the one named.
void require_plain_path(std::string_view text, std::string_view what);

}  // namespace tessera
