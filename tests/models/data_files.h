#pragma once
// Writers of the files the data readers take (JPEG, PNG, .npy, .npz,
// uint16 token streams), so tests make their inputs themselves.
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace pd::testing {

namespace fs = std::filesystem;

// h x w x channels 8-bit pixels: a gradient tinted by `shade`, so crops differ.
inline std::vector<uint8_t> test_pixels(int h, int w, int channels, int shade) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * channels));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        px[static_cast<size_t>((y * w + x) * channels + c)] = static_cast<uint8_t>((shade * 40 + x * 3 + y * 5 + c * 60) % 256);
  return px;
}

inline void write_png(const fs::path& p, int h, int w, int channels, int shade) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const auto px = test_pixels(h, w, channels, shade);
  png_image_write_to_file(&image, p.c_str(), 0, px.data(), 0, nullptr);
}

inline void write_jpeg(const fs::path& p, int h, int w, int channels, int shade) {
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);
  jpeg_create_compress(&info);
  FILE* f = std::fopen(p.c_str(), "wb");
  jpeg_stdio_dest(&info, f);
  info.image_width = static_cast<JDIMENSION>(w);
  info.image_height = static_cast<JDIMENSION>(h);
  info.input_components = channels;
  info.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 90, TRUE);
  jpeg_start_compress(&info, TRUE);
  auto px = test_pixels(h, w, channels, shade);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = px.data() + static_cast<size_t>(info.next_scanline) * static_cast<size_t>(w * channels);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::fclose(f);
}

// `classes` folders of `per_class` images (JPEG and PNG alternating, sizes varying).
inline void write_image_folder(const fs::path& root, int classes, int per_class, int channels = 3) {
  for (int c = 0; c < classes; ++c) {
    const fs::path d = root / ("class" + std::to_string(c));
    fs::create_directories(d);
    for (int i = 0; i < per_class; ++i) {
      const int h = 20 + (i % 4) * 6, w = 24 + (i % 3) * 8;
      char name[32];
      std::snprintf(name, sizeof name, "img%03d", i);
      if (i % 2 == 0) write_jpeg(d / (std::string(name) + ".jpg"), h, w, channels, c);
      else write_png(d / (std::string(name) + ".png"), h, w, channels, c);
    }
  }
}

// A .npy file: descr such as "<f4", the shape, and the raw little-endian data.
inline std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <class T> std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A zip of the members, stored or deflated (what np.savez / savez_compressed write).
inline std::string zip_bytes(const std::map<std::string, std::string>& members, bool compressed) {
  auto u16 = [](std::string& s, uint32_t v) { s += static_cast<char>(v & 0xFF); s += static_cast<char>((v >> 8) & 0xFF); };
  auto u32 = [&](std::string& s, uint32_t v) { u16(s, v & 0xFFFF); u16(s, v >> 16); };
  std::string out, dir;
  for (const auto& [name, data] : members) {
    std::string body = data;
    if (compressed) {
      body.resize(compressBound(static_cast<uLong>(data.size())) + 64);
      z_stream z{};
      deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      z.avail_in = static_cast<uInt>(data.size());
      z.next_out = reinterpret_cast<Bytef*>(body.data());
      z.avail_out = static_cast<uInt>(body.size());
      ::deflate(&z, Z_FINISH);
      body.resize(z.total_out);
      deflateEnd(&z);
    }
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t method = compressed ? 8 : 0;
    u32(out, 0x04034b50); u16(out, 20); u16(out, 0); u16(out, method); u16(out, 0); u16(out, 0);
    u32(out, crc); u32(out, static_cast<uint32_t>(body.size())); u32(out, static_cast<uint32_t>(data.size()));
    u16(out, static_cast<uint32_t>(name.size())); u16(out, 0);
    out += name + body;
    u32(dir, 0x02014b50); u16(dir, 20); u16(dir, 20); u16(dir, 0); u16(dir, method); u16(dir, 0); u16(dir, 0);
    u32(dir, crc); u32(dir, static_cast<uint32_t>(body.size())); u32(dir, static_cast<uint32_t>(data.size()));
    u16(dir, static_cast<uint32_t>(name.size())); u16(dir, 0); u16(dir, 0); u16(dir, 0); u16(dir, 0); u32(dir, 0);
    u32(dir, offset);
    dir += name;
  }
  const uint32_t dir_at = static_cast<uint32_t>(out.size());
  out += dir;
  u32(out, 0x06054b50); u16(out, 0); u16(out, 0); u16(out, static_cast<uint32_t>(members.size()));
  u16(out, static_cast<uint32_t>(members.size())); u32(out, static_cast<uint32_t>(dir.size())); u32(out, dir_at); u16(out, 0);
  return out;
}

}  // namespace pd::testing
