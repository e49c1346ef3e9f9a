// Colour images (PNG, JPEG, BMP) as [3, H, W] RGB tensors, for detection datasets such as COCO.
//
//   std::array<std::int64_t, 2> size = read_color_image_size("val2017/000139.jpg");  // [H, W], header only
//   Tensor image = read_color_image("val2017/000139.jpg", {426, 640});              // [3, 426, 640] f32
//   image.at<float>({0, y, x});                                                     // red, in [0, 1]
//   Tensor photo = decode_color_image(jpeg_bytes, "the image of record 3 of 'train-00000'");  // from memory
//
// Decoded by OpenCV as stored: EXIF orientation is ignored, as annotations refer to the stored pixels.
// 8-bit samples are divided by 255, 16-bit by 65535; a grey image is replicated to 3 channels, an alpha
// channel is dropped; channels are R, G, B. The size is read from the file's header and checked (against
// expected_size, and against max_color_image_pixels) before decoding, so a wrong header or a wrong
// expectation cannot make the decoder allocate a huge image.
//
// read_volume (volume_io.hpp) also reads PNG and JPEG, but as one luminance channel with a geometry;
// this reader keeps the colour and has no geometry. Every failure throws tessera::Error naming the file,
// what is wrong and what to do.
#pragma once

#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tessera {

// The largest image read_color_image accepts: 2^27 pixels (1.5 GiB as f32 RGB), far beyond any photo
// dataset's images.
inline constexpr std::int64_t max_color_image_pixels = std::int64_t{1} << 27;

// [H, W] in pixels from the header of a PNG, JPEG or BMP, without decoding the pixels. Throws when the
// file is none of them or its header does not give the size.
std::array<std::int64_t, 2> read_color_image_size(const std::filesystem::path& path);

// [3, H, W] f32 in [0, 1], channels R, G, B (see above). When expected_size [H, W] is not {0, 0}, the
// header's size must equal it.
Tensor read_color_image(const std::filesystem::path& path, std::array<std::int64_t, 2> expected_size = {0, 0});
// The same from an encoded image in memory (a TFRecord's image/encoded); `what` names it in errors,
// e.g. "the image of record 3 (byte offset 120) of 'train-00000-of-00004'".
Tensor decode_color_image(std::span<const std::byte> bytes, const std::string& what);

// Writes image [3, H, W] (RGB) or [1, H, W] (grey) f32 as an 8-bit PNG: values clamped to [0, 1], times 255,
// rounded. Replaces `path` atomically (a reader never sees half a file). Throws naming the file when it
// cannot be written.
void write_color_png(const Tensor& image, const std::filesystem::path& path);
// The same PNG as bytes in memory (a report embeds its images).
std::vector<std::uint8_t> encode_png(const Tensor& image);

}  // namespace tessera
