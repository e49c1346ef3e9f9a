#include "core/user_files.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace tessera {

FileKind file_kind(const std::filesystem::path& path) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return FileKind::Missing;
    if (S_ISREG(info.st_mode)) return FileKind::Regular;
    if (S_ISDIR(info.st_mode)) return FileKind::Folder;
    if (S_ISFIFO(info.st_mode)) return FileKind::Fifo;
    if (S_ISSOCK(info.st_mode)) return FileKind::Socket;
    if (S_ISBLK(info.st_mode)) return FileKind::BlockDevice;
    if (S_ISCHR(info.st_mode)) return FileKind::CharacterDevice;
    return FileKind::Other;
}

std::string_view file_kind_name(FileKind kind) {
    switch (kind) {
        case FileKind::Missing: return "missing";
        case FileKind::Regular: return "a regular file";
        case FileKind::Folder: return "a folder";
        case FileKind::Fifo: return "a FIFO (named pipe)";
        case FileKind::Socket: return "a socket";
        case FileKind::BlockDevice: return "a block device";
        case FileKind::CharacterDevice: return "a character device";
        case FileKind::Other: return "not a regular file";
    }
    TESSERA_FAIL("unknown FileKind " << static_cast<int>(kind));
}

std::string printable_path(std::string_view path) {
    std::string text;
    for (const char c : path) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            text += escaped;
        } else {
            text += c;
        }
    }
    return text;
}

void require_plain_path(std::string_view text, std::string_view what) {
    for (std::size_t index = 0; index < text.size(); ++index) {
        const auto byte = static_cast<unsigned char>(text[index]);
        TESSERA_CHECK(byte >= 0x20 && byte != 0x7f,
                      what << " \"" << printable_path(text) << "\" holds a control character (" << (byte == 0 ? "NUL" : "byte")
                           << " \\x" << std::hex << static_cast<int>(byte) << std::dec << " at position " << index
                           << "): a path cannot hold one. Retype the name.");
    }
}

void require_regular_file(const std::filesystem::path& path, std::string_view what) {
    require_plain_path(path.native(), what);
    const FileKind kind = file_kind(path);
    TESSERA_CHECK(kind != FileKind::Missing, "cannot read the " << what << " '" << path.string() << "': no such file. Check the path.");
    TESSERA_CHECK(kind != FileKind::Folder, "cannot read the " << what << " '" << path.string()
                                                                 << "': it is a folder, not a file. Name a file inside it.");
    TESSERA_CHECK(kind == FileKind::Regular, "cannot read the " << what << " '" << path.string() << "': it is " << file_kind_name(kind)
                                                                  << ", not a regular file. Tessera reads data only from regular "
                                                                     "files: copy the data into one.");
}

std::string read_user_text_file(const std::filesystem::path& path, std::string_view what) {
    require_regular_file(path, what);
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot read the " << what << " '" << path.string() << "': " << std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    TESSERA_CHECK(!in.bad(), "cannot read the " << what << " '" << path.string() << "': a read error");
    return text.str();
}

}  // namespace tessera
