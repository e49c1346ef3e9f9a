// Fuzz target: gzip-compressed NIfTI (.nii.gz).
// Two kinds of input, so that both the gzip stream handling and the header behind it are reached:
// an input starting with the gzip magic (1f 8b) is the file as it is; any other input is an
// uncompressed .nii that the target gzips first (mutations of the header then survive compression).
#include "volume_target.hpp"

#include <zlib.h>

#include <vector>

namespace {

std::vector<std::uint8_t> gzipped(const std::uint8_t* data, std::size_t size) {
    z_stream stream{};
    if (deflateInit2(&stream, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
    std::vector<std::uint8_t> out(deflateBound(&stream, static_cast<uLong>(size)) + 32);
    stream.next_in = const_cast<Bytef*>(data);
    stream.avail_in = static_cast<uInt>(size);
    stream.next_out = out.data();
    stream.avail_out = static_cast<uInt>(out.size());
    if (deflate(&stream, Z_FINISH) != Z_STREAM_END) std::abort();
    out.resize(stream.total_out);
    deflateEnd(&stream);
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return tessera::fuzz::fuzz_volume_file("fuzz.nii.gz", data, size);
    const std::vector<std::uint8_t> file = gzipped(data, size);
    return tessera::fuzz::fuzz_volume_file("fuzz.nii.gz", file.data(), file.size());
}
