#include "data/synthetic_em.hpp"

#include "core/error.hpp"
#include "core/random.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

namespace tessera::data {
namespace {

constexpr double two_pi = 2.0 * std::numbers::pi;

// Separate streams per stage, so changing e.g. the organelle count leaves the cells where they were.
enum Stream : std::uint64_t { cells_stream, warp_stream, texture_stream, organelle_stream, noise_stream };

struct Wave {
    double kx, ky, phase, amplitude;
};

Wave random_wave(SeededRandom& random, double min_wavelength, double max_wavelength, double amplitude) {
    const double wavelength = min_wavelength + (max_wavelength - min_wavelength) * random.uniform();
    const double angle = two_pi * random.uniform();
    const double k = two_pi / wavelength;
    return Wave{k * std::cos(angle), k * std::sin(angle), two_pi * random.uniform(), amplitude};
}

// A sum of plane waves sampled on the pixel grid. sin(a + b) = sin a cos b + cos a sin b, so a table
// per row and per column replaces a sine per pixel and wave.
class WaveField {
public:
    WaveField(const std::vector<Wave>& waves, std::int64_t height, std::int64_t width) {
        for (const Wave& wave : waves) {
            Table table;
            for (std::int64_t x = 0; x < width; ++x) {
                table.column_sin.push_back(wave.amplitude * std::sin(wave.kx * static_cast<double>(x)));
                table.column_cos.push_back(wave.amplitude * std::cos(wave.kx * static_cast<double>(x)));
            }
            for (std::int64_t y = 0; y < height; ++y) {
                table.row_sin.push_back(std::sin(wave.ky * static_cast<double>(y) + wave.phase));
                table.row_cos.push_back(std::cos(wave.ky * static_cast<double>(y) + wave.phase));
            }
            m_tables.push_back(std::move(table));
        }
    }
    double at(std::int64_t y, std::int64_t x) const {
        double sum = 0;
        const auto row = static_cast<std::size_t>(y), column = static_cast<std::size_t>(x);
        for (const Table& table : m_tables) {
            sum += table.column_sin[column] * table.row_cos[row] + table.column_cos[column] * table.row_sin[row];
        }
        return sum;
    }

private:
    struct Table {
        std::vector<double> column_sin, column_cos, row_sin, row_cos;
    };
    std::vector<Table> m_tables;
};

void blur_rows(const std::vector<float>& in, std::vector<float>& out, std::int64_t rows, std::int64_t cols,
               std::int64_t step_along, std::int64_t step_across, const std::vector<float>& kernel) {
    // Along one axis with clamp-to-edge; step_along / step_across are element strides.
    const auto radius = static_cast<std::int64_t>(kernel.size() / 2);
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            float sum = 0.0f;
            for (std::int64_t t = -radius; t <= radius; ++t) {
                const std::int64_t source = std::clamp<std::int64_t>(c + t, 0, cols - 1);
                sum += kernel[static_cast<std::size_t>(t + radius)] * in[static_cast<std::size_t>(r * step_across + source * step_along)];
            }
            out[static_cast<std::size_t>(r * step_across + c * step_along)] = sum;
        }
    }
}

void gaussian_blur(std::vector<float>& image, std::int64_t height, std::int64_t width, double sigma) {
    if (sigma <= 0) return;
    const auto radius = static_cast<std::int64_t>(std::ceil(3.0 * sigma));
    std::vector<float> kernel;
    double total = 0;
    for (std::int64_t t = -radius; t <= radius; ++t) total += std::exp(-0.5 * static_cast<double>(t * t) / (sigma * sigma));
    for (std::int64_t t = -radius; t <= radius; ++t) {
        kernel.push_back(static_cast<float>(std::exp(-0.5 * static_cast<double>(t * t) / (sigma * sigma)) / total));
    }
    std::vector<float> scratch(image.size());
    blur_rows(image, scratch, height, width, 1, width, kernel);   // along W
    blur_rows(scratch, image, width, height, width, 1, kernel);   // along H
}

}  // namespace

EmSection make_em_section(const EmSectionOptions& options) {
    const std::int64_t height = options.size[0];
    const std::int64_t width = options.size[1];
    TESSERA_CHECK(height > 0 && width > 0, "EM section size must be positive, got " << height << "×" << width);
    TESSERA_CHECK(options.cell_size >= 4, "EM cell_size must be at least 4 px, got " << options.cell_size);
    TESSERA_CHECK(options.membrane_width > 0 && options.membrane_width < options.cell_size / 2,
                  "EM membrane_width must be in (0, cell_size / 2), got " << options.membrane_width);
    TESSERA_CHECK(options.noise_sigma >= 0 && options.blur_sigma >= 0,
                  "EM noise_sigma and blur_sigma must be ≥ 0, got " << options.noise_sigma << " and "
                                                                    << options.blur_sigma);

    // Cells: one seed per grid square, jittered, plus a ring of squares outside the image so borders
    // near the edge are where they would be in a larger section.
    const double cell = options.cell_size;
    const auto grid_cols = static_cast<std::int64_t>(std::ceil(static_cast<double>(width) / cell)) + 2;
    const auto grid_rows = static_cast<std::int64_t>(std::ceil(static_cast<double>(height) / cell)) + 2;
    SeededRandom cells_random(options.seed, cells_stream);
    std::vector<double> seed_x, seed_y;
    std::vector<float> cytoplasm;  // grey level per cell
    for (std::int64_t gy = 0; gy < grid_rows; ++gy) {
        for (std::int64_t gx = 0; gx < grid_cols; ++gx) {
            seed_x.push_back((static_cast<double>(gx - 1) + 0.5 + 0.4 * cells_random.symmetric()) * cell);
            seed_y.push_back((static_cast<double>(gy - 1) + 0.5 + 0.4 * cells_random.symmetric()) * cell);
            cytoplasm.push_back(static_cast<float>(0.62 + 0.16 * cells_random.uniform()));
        }
    }

    // A slow warp of the plane makes the straight Voronoi edges gently curved, as real membranes are.
    SeededRandom warp_random(options.seed, warp_stream);
    const WaveField warp_x({random_wave(warp_random, 4 * cell, 8 * cell, 0.1 * cell),
                            random_wave(warp_random, 2 * cell, 4 * cell, 0.05 * cell)},
                           height, width);
    const WaveField warp_y({random_wave(warp_random, 4 * cell, 8 * cell, 0.1 * cell),
                            random_wave(warp_random, 2 * cell, 4 * cell, 0.05 * cell)},
                           height, width);
    SeededRandom texture_random(options.seed, texture_stream);
    std::vector<Wave> texture_waves;
    for (int wave = 0; wave < 4; ++wave) texture_waves.push_back(random_wave(texture_random, 0.3 * cell, 1.5 * cell, 0.025));
    const WaveField texture(texture_waves, height, width);
    const float membrane_grey = static_cast<float>(0.16 + 0.06 * texture_random.uniform());

    EmSection section;
    ImageGeometry geometry;
    geometry.size = {width, height, 1};
    geometry.spacing = {0.004, 0.004, 0.05};  // mm: 4 nm pixels, 50 nm sections
    section.image = make_volume(geometry);
    section.image.source_scalar_type = "float32";
    section.image.source_path = "synthetic EM (seed " + std::to_string(options.seed) + ")";
    section.labels = make_label_map(geometry);
    section.labels.source_path = section.image.source_path;
    std::int32_t* labels = section.labels.labels.data<std::int32_t>();

    const double half_width = 0.5 * options.membrane_width;
    const double reach = half_width + 1.0;  // px from a border that are darkened
    std::vector<float> grey(static_cast<std::size_t>(height * width));
    for (std::int64_t y = 0; y < height; ++y) {
        for (std::int64_t x = 0; x < width; ++x) {
            const double px = static_cast<double>(x) + warp_x.at(y, x);
            const double py = static_cast<double>(y) + warp_y.at(y, x);
            // Seeds are jittered by less than half a square: the nearest ones are within two squares.
            const auto gx = static_cast<std::int64_t>(std::floor(px / cell)) + 1;
            const auto gy = static_cast<std::int64_t>(std::floor(py / cell)) + 1;
            std::int64_t candidates[25];
            int num_candidates = 0;
            for (std::int64_t ny = gy - 2; ny <= gy + 2; ++ny) {
                for (std::int64_t nx = gx - 2; nx <= gx + 2; ++nx) {
                    if (ny >= 0 && ny < grid_rows && nx >= 0 && nx < grid_cols) candidates[num_candidates++] = ny * grid_cols + nx;
                }
            }
            std::int64_t nearest = candidates[0];
            double nearest_squared = std::numeric_limits<double>::max();
            for (int c = 0; c < num_candidates; ++c) {
                const auto s = static_cast<std::size_t>(candidates[c]);
                const double d = (px - seed_x[s]) * (px - seed_x[s]) + (py - seed_y[s]) * (py - seed_y[s]);
                if (d < nearest_squared) {
                    nearest_squared = d;
                    nearest = candidates[c];
                }
            }
            // Distance to the cell's border: to the nearest bisector between its seed and another. Only
            // distances below `reach` matter (membrane and its soft edge); the bisector with seed s is at
            // least (|p - s| - |p - n|) / 2 away, which skips most candidates without a division.
            const auto n = static_cast<std::size_t>(nearest);
            const double nearest_distance = std::sqrt(nearest_squared);
            double border = reach;
            double skip_beyond = (nearest_distance + 2.0 * border) * (nearest_distance + 2.0 * border);  // squared
            for (int c = 0; c < num_candidates; ++c) {
                if (candidates[c] == nearest) continue;
                const auto s = static_cast<std::size_t>(candidates[c]);
                const double d = (px - seed_x[s]) * (px - seed_x[s]) + (py - seed_y[s]) * (py - seed_y[s]);
                if (d >= skip_beyond) continue;
                const double separation = std::sqrt((seed_x[s] - seed_x[n]) * (seed_x[s] - seed_x[n]) +
                                                    (seed_y[s] - seed_y[n]) * (seed_y[s] - seed_y[n]));
                border = std::min(border, (d - nearest_squared) / (2.0 * separation));
                skip_beyond = (nearest_distance + 2.0 * border) * (nearest_distance + 2.0 * border);
            }
            const std::size_t pixel = static_cast<std::size_t>(y * width + x);
            const bool membrane = border < half_width;
            labels[pixel] = membrane ? 1 : 0;
            float value = cytoplasm[n];
            value += static_cast<float>(texture.at(y, x));
            // Dark across the labelled width, fading over one more pixel: membranes have soft edges.
            const double darkness = std::clamp(reach - border, 0.0, 1.0);
            grey[pixel] = static_cast<float>(value + darkness * (membrane_grey - value));
        }
    }

    // Organelles: dark ellipses inside cells (mitochondria, vesicles); not labelled, as in ISBI.
    SeededRandom organelle_random(options.seed, organelle_stream);
    const auto num_organelles = static_cast<std::int64_t>(
        0.6 * static_cast<double>(height * width) / (cell * cell));
    for (std::int64_t o = 0; o < num_organelles; ++o) {
        const double cx = static_cast<double>(width) * organelle_random.uniform();
        const double cy = static_cast<double>(height) * organelle_random.uniform();
        const double radius = (0.06 + 0.12 * organelle_random.uniform()) * cell;
        const double aspect = 1.0 + 0.8 * organelle_random.uniform();
        const double angle = std::numbers::pi * organelle_random.uniform();
        const auto tone = static_cast<float>(0.3 + 0.15 * organelle_random.uniform());
        const double ca = std::cos(angle), sa = std::sin(angle);
        const double extent = radius * aspect + 1;
        for (auto y = std::max<std::int64_t>(0, static_cast<std::int64_t>(cy - extent));
             y <= std::min<std::int64_t>(height - 1, static_cast<std::int64_t>(cy + extent)); ++y) {
            for (auto x = std::max<std::int64_t>(0, static_cast<std::int64_t>(cx - extent));
                 x <= std::min<std::int64_t>(width - 1, static_cast<std::int64_t>(cx + extent)); ++x) {
                const double u = ((static_cast<double>(x) - cx) * ca + (static_cast<double>(y) - cy) * sa) / (radius * aspect);
                const double v = (-(static_cast<double>(x) - cx) * sa + (static_cast<double>(y) - cy) * ca) / radius;
                const std::size_t pixel = static_cast<std::size_t>(y * width + x);
                if (u * u + v * v <= 1.0 && labels[pixel] == 0) grey[pixel] = tone;
            }
        }
    }

    gaussian_blur(grey, height, width, options.blur_sigma);
    SeededRandom noise_random(options.seed, noise_stream);
    float* voxels = section.image.voxels.data<float>();
    for (std::size_t pixel = 0; pixel < grey.size(); ++pixel) {
        voxels[pixel] = grey[pixel] + static_cast<float>(options.noise_sigma * noise_random.normal());
    }
    return section;
}

}  // namespace tessera::data
