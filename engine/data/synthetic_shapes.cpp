#include "data/synthetic_shapes.hpp"

#include "core/error.hpp"
#include "core/random.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

namespace tessera::data {
namespace {

// Separate streams, so the background depends only on size, channels, texture and seed (a layout with no
// objects shows the background of any other), and the noise does not move the objects.
enum Stream : std::uint64_t { layout_stream, background_stream, noise_stream };

constexpr int position_tries = 40;        // per size, before the object is shrunk
constexpr double shrink_factor = 0.85;
constexpr int colour_tries = 24;
constexpr std::int64_t box_gap = 2;       // px between boxes when overlap is forbidden
constexpr double cross_bar_width = 0.4;   // of the cross's extent
constexpr std::int64_t max_automatic_count = 2000;

// Elementary functions from + − × ÷ alone: libm's may differ in the last bit between libraries and CPU
// code paths, and a size or an angle one ulp off can move a pixel across a shape's edge.

// ln x, x > 0: x = m · 2^e with m in [√½, √2); ln m = 2 atanh t, t = (m − 1) / (m + 1), |t| ≤ 0.172, so
// eleven odd terms reach double precision (t^23 / 23 < 1e-18).
double portable_log(double x) {
    int exponent = 0;
    double mantissa = std::frexp(x, &exponent);  // [0.5, 1), exact
    if (mantissa < std::numbers::sqrt2 / 2) {
        mantissa *= 2;
        --exponent;
    }
    const double t = (mantissa - 1) / (mantissa + 1);
    double series = 0;  // Σ t^(k−1) / k over odd k, by Horner in t²
    for (int k = 21; k >= 1; k -= 2) series = series * t * t + 1.0 / k;
    return 2 * t * series + exponent * std::numbers::ln2;
}

// e^x = 2^k e^r, |r| ≤ ln2 / 2; Taylor to r^17 (0.35^18 / 18! < 1e-23).
double portable_exp(double x) {
    const double k = std::round(x / std::numbers::ln2);
    const double r = x - k * std::numbers::ln2;
    double series = 1;
    for (int n = 17; n >= 1; --n) series = 1 + series * r / n;
    return std::ldexp(series, static_cast<int>(k));
}

// |angle| ≤ π/4: Taylor to angle^18 (0.79^19 / 19! < 1e-18).
void portable_sin_cos(double angle, double& sine, double& cosine) {
    const double squared = angle * angle;
    double s = 1, c = 1;
    for (int n = 17; n >= 3; n -= 2) s = 1 - s * squared / (n * (n - 1));
    for (int n = 18; n >= 2; n -= 2) c = 1 - c * squared / (n * (n - 1));
    sine = angle * s;
    cosine = c;
}

// Random values on a lattice of `cell` px, smoothstep-interpolated at pixel centres, added to `field`
// ([H, W]) with amplitude `amplitude`. Interpolating along W once per lattice row leaves one interpolation
// between two precomputed lines per pixel.
void add_value_noise(float* field, std::int64_t height, std::int64_t width, double cell, double amplitude,
                     SeededRandom& random) {
    const auto lattice_columns = static_cast<std::int64_t>(static_cast<double>(width) / cell) + 2;
    const auto lattice_rows = static_cast<std::int64_t>(static_cast<double>(height) / cell) + 2;
    std::vector<float> lattice(static_cast<std::size_t>(lattice_rows * lattice_columns));
    for (float& value : lattice) value = static_cast<float>(amplitude * random.symmetric());

    const auto smooth = [](double f) { return static_cast<float>(f * f * (3 - 2 * f)); };
    std::vector<std::int64_t> column_index(static_cast<std::size_t>(width));
    std::vector<float> column_weight(static_cast<std::size_t>(width));
    for (std::int64_t x = 0; x < width; ++x) {
        const double position = (static_cast<double>(x) + 0.5) / cell;
        const double floor_position = std::floor(position);
        column_index[static_cast<std::size_t>(x)] = static_cast<std::int64_t>(floor_position);
        column_weight[static_cast<std::size_t>(x)] = smooth(position - floor_position);
    }
    std::vector<float> lines(static_cast<std::size_t>(lattice_rows * width));  // [lattice rows, W]
    for (std::int64_t row = 0; row < lattice_rows; ++row) {
        const float* lattice_row = lattice.data() + row * lattice_columns;
        float* line = lines.data() + row * width;
        for (std::int64_t x = 0; x < width; ++x) {
            const std::int64_t i = column_index[static_cast<std::size_t>(x)];
            line[x] = lattice_row[i] + column_weight[static_cast<std::size_t>(x)] * (lattice_row[i + 1] - lattice_row[i]);
        }
    }
    for (std::int64_t y = 0; y < height; ++y) {
        const double position = (static_cast<double>(y) + 0.5) / cell;
        const double floor_position = std::floor(position);
        const float weight = smooth(position - floor_position);
        const float* above = lines.data() + static_cast<std::int64_t>(floor_position) * width;
        const float* below = above + width;
        float* out = field + y * width;
        for (std::int64_t x = 0; x < width; ++x) out[x] += above[x] + weight * (below[x] - above[x]);
    }
}

// The unit shapes, centred on the origin in [−0.5, 0.5]², y down (the triangle's apex points up).
// Class ids are checked where plans are made; this runs per pixel and must stay small enough to inline.
bool inside_unit_shape(std::int32_t class_id, double u, double v) {
    const double half_bar = 0.5 * cross_bar_width;
    switch (class_id) {
    case 0: return u * u + v * v <= 0.25;
    case 1: return std::abs(u) <= 0.5 && std::abs(v) <= 0.5;
    case 2: return v <= 0.5 && std::abs(u) <= 0.5 * (v + 0.5);
    default: return (std::abs(u) <= half_bar && std::abs(v) <= 0.5) || (std::abs(v) <= half_bar && std::abs(u) <= 0.5);
    }
}

// Corners of the polygons (the disc has none: its extent is ±0.5 at any angle).
std::vector<std::array<double, 2>> unit_shape_corners(std::int32_t class_id) {
    const double h = 0.5 * cross_bar_width;
    switch (class_id) {
    case 0: return {};
    case 1: return {{-0.5, -0.5}, {0.5, -0.5}, {0.5, 0.5}, {-0.5, 0.5}};
    case 2: return {{0.0, -0.5}, {0.5, 0.5}, {-0.5, 0.5}};
    case 3: return {{-h, -0.5}, {h, -0.5}, {0.5, -h}, {0.5, h}, {h, 0.5}, {-h, 0.5}, {-0.5, h}, {-0.5, -h}};
    default: TESSERA_FAIL("unknown shape class " << class_id);
    }
}

struct Plan {
    double size = 0;  // px, larger side of the box
    std::int32_t class_id = 0;
    double sine = 0, cosine = 1;  // of the turn, quarter turns included; (u, v) → (u c − v s, u s + v c)
};

// Where a plan is put: its box's top-left corner at (left, top) px, `scale` px per unit, the shape's origin.
struct Placement {
    double scale = 1, origin_x = 0, origin_y = 0;  // px per unit; px
    double left = 0, top = 0, box_width = 0, box_height = 0;  // px, the turned shape's nominal box
};

// One object as rasterised: its mask (flat pixel indices y·W + x) and the mask's extent.
struct Rasterised {
    std::vector<std::int64_t> pixels;
    std::int64_t x_min = 0, y_min = 0, x_max = -1, y_max = -1;  // inclusive pixel indices
};

// The pixels whose centres lie in the shape, tested in the shape's own frame. `keep(pixel)` sees each
// mask pixel as it is found and may veto the placement (returns false), which stops the rasterising
// early: most rejected placements are found out after a few rows.
template <class KeepPixel>
bool rasterise(const Plan& plan, const Placement& at, std::int64_t height, std::int64_t width, Rasterised& result,
               KeepPixel&& keep) {
    result.pixels.clear();
    result.x_max = result.y_max = -1;
    result.x_min = width, result.y_min = height;
    const auto x_begin = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor(at.left)));
    const auto x_end = std::min<std::int64_t>(width - 1, static_cast<std::int64_t>(std::floor(at.left + at.box_width)));
    const auto y_begin = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor(at.top)));
    const auto y_end = std::min<std::int64_t>(height - 1, static_cast<std::int64_t>(std::floor(at.top + at.box_height)));
    const double units_per_pixel = 1 / at.scale;
    for (std::int64_t y = y_begin; y <= y_end; ++y) {
        const double dy = (static_cast<double>(y) + 0.5 - at.origin_y) * units_per_pixel;
        for (std::int64_t x = x_begin; x <= x_end; ++x) {
            const double dx = (static_cast<double>(x) + 0.5 - at.origin_x) * units_per_pixel;
            const double u = dx * plan.cosine + dy * plan.sine;  // turned back into the shape's frame
            const double v = dy * plan.cosine - dx * plan.sine;
            if (!inside_unit_shape(plan.class_id, u, v)) continue;
            const std::int64_t pixel = y * width + x;
            if (!keep(pixel)) return false;
            result.pixels.push_back(pixel);
            result.x_min = std::min(result.x_min, x);
            result.x_max = std::max(result.x_max, x);
            result.y_min = std::min(result.y_min, y);
            result.y_max = y;
        }
    }
    return !result.pixels.empty();
}

struct ResolvedSizes {
    double min_size, max_size;  // px
};

ResolvedSizes resolve_sizes(const ShapesOptions& options) {
    const auto shorter_side = static_cast<double>(std::min(options.size[0], options.size[1]));
    const double max_size = std::min(options.max_object_size, shorter_side);
    return {std::min(options.min_object_size, max_size), max_size};
}

void check_options(const ShapesOptions& options) {
    const auto [height, width] = options.size;
    TESSERA_CHECK(height > 0 && width > 0 && height <= max_shapes_image_side && width <= max_shapes_image_side,
                  "shapes image size [H, W] must be 1.." << max_shapes_image_side << " pixels per side, got ["
                                                         << height << ", " << width << "]");
    TESSERA_CHECK(options.channels == 1 || options.channels == 3,
                  "shapes channels must be 3 (RGB) or 1 (grey), got " << options.channels);
    const bool automatic = options.min_objects == automatic_object_count &&
                           options.max_objects == automatic_object_count;
    TESSERA_CHECK(automatic || (options.min_objects >= 0 && options.min_objects <= options.max_objects &&
                                options.max_objects <= 100000),
                  "shapes object counts must satisfy 0 ≤ min_objects ≤ max_objects ≤ 100000, or both be automatic ("
                      << automatic_object_count << "), got " << options.min_objects << ".." << options.max_objects);
    TESSERA_CHECK(options.min_object_size >= 4 && options.min_object_size <= options.max_object_size &&
                      std::isfinite(options.max_object_size),
                  "shapes object sizes must satisfy 4 ≤ min_object_size ≤ max_object_size (px), got "
                      << options.min_object_size << ".." << options.max_object_size);
    TESSERA_CHECK(options.max_rotation_degrees >= 0 && options.max_rotation_degrees <= 45,
                  "shapes max_rotation_degrees must be in [0, 45] (quarter turns come on top), got "
                      << options.max_rotation_degrees);
    TESSERA_CHECK(options.min_visible_fraction >= 0 && options.min_visible_fraction <= 1,
                  "shapes min_visible_fraction must be in [0, 1], got " << options.min_visible_fraction);
    TESSERA_CHECK(options.min_contrast >= 0 && options.min_contrast <= 1,
                  "shapes min_contrast must be in [0, 1], got " << options.min_contrast);
    TESSERA_CHECK(options.texture_strength >= 0 && options.texture_strength <= 4,
                  "shapes texture_strength must be in [0, 4], got " << options.texture_strength);
    TESSERA_CHECK(options.noise_sigma >= 0 && options.noise_sigma <= 1,
                  "shapes noise_sigma must be in [0, 1], got " << options.noise_sigma);
}

}  // namespace

std::string_view shape_class_name(std::int32_t class_id) {
    static constexpr std::string_view names[num_shape_classes] = {"disc", "square", "triangle", "cross"};
    TESSERA_CHECK(class_id >= 0 && class_id < num_shape_classes,
                  "shape class must be 0.." << num_shape_classes - 1 << ", got " << class_id);
    return names[class_id];
}

std::array<std::int64_t, 2> shapes_object_count_range(const ShapesOptions& options) {
    check_options(options);
    if (options.min_objects != automatic_object_count) return {options.min_objects, options.max_objects};
    // Mean box area of a log-uniform side s on [a, b]: E[s²] = (b² − a²) / (2 ln(b / a)).
    const auto [min_size, max_size] = resolve_sizes(options);
    const double mean_box_area = max_size > min_size
        ? (max_size * max_size - min_size * min_size) / (2 * portable_log(max_size / min_size))
        : max_size * max_size;
    const double boxes_per_image = static_cast<double>(options.size[0] * options.size[1]) / mean_box_area;
    const std::int64_t min_objects = std::clamp<std::int64_t>(std::llround(0.3 * boxes_per_image), 1, max_automatic_count);
    const std::int64_t max_objects =
        std::clamp<std::int64_t>(std::llround(0.9 * boxes_per_image), min_objects, max_automatic_count);
    return {min_objects, max_objects};
}

namespace {

// Background: colour per channel from two coarse octaves, a brightness texture shared by all channels
// (and carried by the objects) from two fine ones. Returns that texture ([H, W]).
std::vector<float> paint_background(const ShapesOptions& options, float* image) {
    const auto [height, width] = options.size;
    const std::int64_t plane = height * width;
    const auto texture = options.texture_strength;
    std::vector<float> detail(static_cast<std::size_t>(plane), 0.0f);  // [H, W]
    if (texture <= 0) return detail;
    SeededRandom background_random(options.seed, background_stream);
    for (std::int64_t channel = 0; channel < options.channels; ++channel) {
        add_value_noise(image + channel * plane, height, width, 160, 0.30 * texture, background_random);
        add_value_noise(image + channel * plane, height, width, 48, 0.14 * texture, background_random);
    }
    add_value_noise(detail.data(), height, width, 14, 0.07 * texture, background_random);
    add_value_noise(detail.data(), height, width, 4, 0.04 * texture, background_random);
    for (std::int64_t channel = 0; channel < options.channels; ++channel) {
        float* out = image + channel * plane;
        for (std::int64_t p = 0; p < plane; ++p) out[p] += detail[static_cast<std::size_t>(p)];
    }
    return detail;
}

// Layout: count, then sizes, classes and turns; largest first, the order they are drawn in.
std::vector<Plan> plan_objects(const ShapesOptions& options, std::int64_t min_objects, std::int64_t max_objects, SeededRandom& random) {
    const std::int64_t num_objects =
        std::min(max_objects, min_objects + static_cast<std::int64_t>(random.uniform() * static_cast<double>(max_objects - min_objects + 1)));
    const auto [min_size, max_size] = resolve_sizes(options);
    const double log_size_ratio = portable_log(max_size / min_size);
    const double max_angle = options.max_rotation_degrees * std::numbers::pi / 180;
    std::vector<Plan> plans(static_cast<std::size_t>(num_objects));
    for (Plan& plan : plans) {
        plan.size = min_size * portable_exp(random.uniform() * log_size_ratio);
        plan.class_id = std::min<std::int32_t>(num_shape_classes - 1, static_cast<std::int32_t>(random.uniform() * num_shape_classes));
        const int quarter_turns = std::min(3, static_cast<int>(random.uniform() * 4));
        portable_sin_cos(max_angle * random.symmetric(), plan.sine, plan.cosine);
        // A quarter turn more: (c, s) → (−s, c), exact, so upright shapes stay exactly upright.
        for (int turn = 0; turn < quarter_turns; ++turn) plan.sine = std::exchange(plan.cosine, -plan.sine);
    }
    std::stable_sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) { return a.size > b.size; });
    return plans;
}

// The turned shape's extent in units, to scale its box's larger side to the planned size.
struct UnitExtent {
    double min_x = -0.5, max_x = 0.5, min_y = -0.5, max_y = 0.5;
};

UnitExtent turned_extent(const Plan& plan) {
    UnitExtent extent;
    const auto corners = unit_shape_corners(plan.class_id);
    if (corners.empty()) return extent;
    extent.min_x = extent.min_y = 1e9;
    extent.max_x = extent.max_y = -1e9;
    for (const auto [u, v] : corners) {
        const double x = u * plan.cosine - v * plan.sine, y = u * plan.sine + v * plan.cosine;
        extent.min_x = std::min(extent.min_x, x), extent.max_x = std::max(extent.max_x, x);
        extent.min_y = std::min(extent.min_y, y), extent.max_y = std::max(extent.max_y, y);
    }
    return extent;
}

// The ring of a placed object: pixels outside its mask with a mask pixel among their 8 neighbours
// (`local_mask` is scratch over the mask's box and a pixel around it).
void ring_around(const Rasterised& placed, std::int64_t height, std::int64_t width, std::vector<char>& local_mask,
                 std::vector<std::int64_t>& ring) {
    const std::int64_t window_x = placed.x_min - 1, window_y = placed.y_min - 1;
    const std::int64_t window_width = placed.x_max - placed.x_min + 3, window_height = placed.y_max - placed.y_min + 3;
    local_mask.assign(static_cast<std::size_t>(window_width * window_height), 0);
    for (const std::int64_t p : placed.pixels) {
        local_mask[static_cast<std::size_t>((p / width - window_y) * window_width + (p % width - window_x))] = 1;
    }
    ring.clear();
    for (std::int64_t ly = 0; ly < window_height; ++ly) {
        const std::int64_t y = window_y + ly;
        if (y < 0 || y >= height) continue;
        for (std::int64_t lx = 0; lx < window_width; ++lx) {
            const std::int64_t x = window_x + lx;
            if (x < 0 || x >= width || local_mask[static_cast<std::size_t>(ly * window_width + lx)]) continue;
            bool next_to_mask = false;
            for (std::int64_t ny = std::max<std::int64_t>(0, ly - 1); ny <= std::min(window_height - 1, ly + 1); ++ny) {
                for (std::int64_t nx = std::max<std::int64_t>(0, lx - 1); nx <= std::min(window_width - 1, lx + 1); ++nx) {
                    next_to_mask = next_to_mask || local_mask[static_cast<std::size_t>(ny * window_width + nx)];
                }
            }
            if (next_to_mask) ring.push_back(y * width + x);
        }
    }
}

// An object's colour: the first draw at least min_contrast from every ring pixel's colour, else the
// farthest of colour_tries draws. `ring_colours` is scratch ([ring pixels, C]).
std::array<float, 3> contrasting_colour(const ShapesOptions& options, const float* image, const std::vector<std::int64_t>& ring,
                                        std::vector<float>& ring_colours, SeededRandom& random) {
    const std::int64_t channels = options.channels, plane = options.size[0] * options.size[1];
    // Gathered once: the draws below compare against them repeatedly.
    ring_colours.resize(ring.size() * static_cast<std::size_t>(channels));
    for (std::size_t r = 0; r < ring.size(); ++r) {
        for (std::int64_t channel = 0; channel < channels; ++channel) {
            ring_colours[r * static_cast<std::size_t>(channels) + static_cast<std::size_t>(channel)] = image[channel * plane + ring[r]];
        }
    }
    std::array<float, 3> colour{}, best_colour{};
    double best_distance = -1;
    const double wanted = options.min_contrast * options.min_contrast;  // squared
    for (int attempt = 0; attempt < colour_tries && best_distance < wanted; ++attempt) {
        for (std::int64_t channel = 0; channel < channels; ++channel) colour[static_cast<std::size_t>(channel)] = static_cast<float>(random.uniform());
        double nearest = 1e9;  // squared distance to the nearest ring pixel
        for (std::size_t r = 0; r < ring.size() && nearest > best_distance; ++r) {
            double squared = 0;
            for (std::int64_t channel = 0; channel < channels; ++channel) {
                const double difference = static_cast<double>(colour[static_cast<std::size_t>(channel)]) -
                                          ring_colours[r * static_cast<std::size_t>(channels) + static_cast<std::size_t>(channel)];
                squared += difference * difference;
            }
            nearest = std::min(nearest, squared);
        }
        if (nearest > best_distance) {
            best_distance = nearest;
            best_colour = colour;
        }
    }
    return best_colour;
}

// Per-pixel noise, then clamping. Each value is the sum of two 16-bit uniforms (triangular on ±√6 σ,
// std σ), two values per draw: a Box–Muller draw per value would cost more than the rest at 2560².
void add_pixel_noise(const ShapesOptions& options, float* image, std::int64_t num_values) {
    if (options.noise_sigma <= 0) {
        for (std::int64_t i = 0; i < num_values; ++i) image[i] = std::clamp(image[i], 0.0f, 1.0f);
        return;
    }
    SeededRandom noise_random(options.seed, noise_stream);
    const auto step = static_cast<float>(options.noise_sigma * std::sqrt(6.0) / 65536);  // per unit of the sum
    const auto noisy = [&](float value, std::uint64_t bits) {  // bits: two 16-bit uniforms in the low 32
        const auto centred = static_cast<std::int32_t>((bits & 0xffff) + ((bits >> 16) & 0xffff)) - 65535;
        return std::clamp(value + step * static_cast<float>(centred), 0.0f, 1.0f);
    };
    std::int64_t i = 0;
    for (; i + 1 < num_values; i += 2) {
        const std::uint64_t bits = noise_random.next();
        image[i] = noisy(image[i], bits);
        image[i + 1] = noisy(image[i + 1], bits >> 32);
    }
    if (i < num_values) image[i] = noisy(image[i], noise_random.next());
}

}  // namespace

ShapesImage make_shapes_image(const ShapesOptions& options) {
    const auto [min_objects, max_objects] = shapes_object_count_range(options);  // checks the options
    const auto [height, width] = options.size;
    const std::int64_t channels = options.channels;
    const std::int64_t plane = height * width;

    ShapesImage result;
    result.image = Tensor::full<float>({channels, height, width}, 0.5f);
    float* image = result.image.data<float>();
    const std::vector<float> detail = paint_background(options, image);  // [H, W]

    SeededRandom random(options.seed, layout_stream);
    const std::vector<Plan> plans = plan_objects(options, min_objects, max_objects, random);
    const double min_size = resolve_sizes(options).min_size;

    std::vector<std::int32_t> owner(static_cast<std::size_t>(plane), -1);  // [H, W]: top object, −1 background
    // Per drawn object: how many more of its pixels may be covered, visible − min_visible_fraction · mask.
    std::vector<double> may_hide;
    std::vector<std::int64_t> hidden(plans.size(), 0);  // by the placement being tried
    std::vector<std::int32_t> touched;
    Rasterised placed;
    std::vector<char> local_mask;
    std::vector<std::int64_t> ring;
    std::vector<float> ring_colours;  // [ring pixels, C]
    // A placement may cover pixels of earlier objects only while each keeps min_visible_fraction visible.
    const auto keeps_earlier_objects_visible = [&](std::int64_t pixel) {
        const std::int32_t below = owner[static_cast<std::size_t>(pixel)];
        if (below < 0) return true;
        const auto b = static_cast<std::size_t>(below);
        if (hidden[b]++ == 0) touched.push_back(below);
        return static_cast<double>(hidden[b]) <= may_hide[b];
    };
    const auto separate_from_earlier_boxes = [&] {
        for (const detection::LabeledBox& other : result.objects) {
            const detection::Box& box = other.box;
            if (static_cast<double>(placed.x_min) < box.x_max + box_gap && box.x_min < static_cast<double>(placed.x_max + 1 + box_gap) &&
                static_cast<double>(placed.y_min) < box.y_max + box_gap && box.y_min < static_cast<double>(placed.y_max + 1 + box_gap)) {
                return false;
            }
        }
        return true;
    };
    for (Plan plan : plans) {
        const UnitExtent extent = turned_extent(plan);
        bool found = false;
        while (!found) {  // tries at the planned size, then smaller ones down to min_size
            Placement at;
            at.scale = plan.size / std::max(extent.max_x - extent.min_x, extent.max_y - extent.min_y);
            at.box_width = at.scale * (extent.max_x - extent.min_x), at.box_height = at.scale * (extent.max_y - extent.min_y);
            for (int attempt = 0; attempt < position_tries && !found; ++attempt) {
                at.left = random.uniform() * std::max(0.0, static_cast<double>(width) - at.box_width);
                at.top = random.uniform() * std::max(0.0, static_cast<double>(height) - at.box_height);
                at.origin_x = at.left - at.scale * extent.min_x, at.origin_y = at.top - at.scale * extent.min_y;
                if (options.allow_overlap) {
                    found = rasterise(plan, at, height, width, placed, keeps_earlier_objects_visible);
                    for (const std::int32_t below : touched) hidden[static_cast<std::size_t>(below)] = 0;
                    touched.clear();
                } else {
                    found = rasterise(plan, at, height, width, placed, [](std::int64_t) { return true; }) &&
                            separate_from_earlier_boxes();
                }
            }
            if (found || plan.size <= min_size) break;
            plan.size = std::max(min_size, plan.size * shrink_factor);
        }
        if (!found) continue;  // no room under the occlusion rule: left out

        ring_around(placed, height, width, local_mask, ring);  // as drawn so far
        const std::array<float, 3> colour = contrasting_colour(options, image, ring, ring_colours, random);
        const auto id = static_cast<std::int32_t>(result.objects.size());
        for (const std::int64_t p : placed.pixels) {
            std::int32_t& top = owner[static_cast<std::size_t>(p)];
            if (top >= 0) --may_hide[static_cast<std::size_t>(top)];
            top = id;
            for (std::int64_t channel = 0; channel < channels; ++channel) {
                image[channel * plane + p] = colour[static_cast<std::size_t>(channel)] + detail[static_cast<std::size_t>(p)];
            }
        }
        may_hide.push_back((1 - options.min_visible_fraction) * static_cast<double>(placed.pixels.size()));
        result.objects.push_back({detection::Box{static_cast<float>(placed.x_min), static_cast<float>(placed.y_min),
                                                 static_cast<float>(placed.x_max + 1), static_cast<float>(placed.y_max + 1)},
                                  plan.class_id});
    }
    add_pixel_noise(options, image, channels * plane);
    return result;
}

}  // namespace tessera::data
