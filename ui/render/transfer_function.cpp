#include "render/transfer_function.hpp"

#include "core/error.hpp"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>

namespace tessera::ui {

// ---- IntensityDistribution ---------------------------------------------------------------------

namespace {

// Enough samples for percentiles to ±0.01 % of the voxels, few enough to sort in milliseconds.
constexpr std::int64_t max_distribution_samples = 1 << 18;

}  // namespace

IntensityDistribution IntensityDistribution::fromValues(std::vector<float> values) {
    std::erase_if(values, [](float v) { return !std::isfinite(v); });
    std::sort(values.begin(), values.end());
    IntensityDistribution result;
    result.m_sorted = std::move(values);
    return result;
}

IntensityDistribution IntensityDistribution::fromVolume(const tessera::Volume& volume) {
    if (!volume.voxels.is_defined() || volume.voxels.num_elements() == 0) return {};
    const tessera::Tensor voxels = volume.voxels.contiguous();
    const float* data = voxels.data<float>();
    const std::int64_t count = voxels.num_elements();
    std::int64_t stride = std::max<std::int64_t>(1, count / max_distribution_samples);
    if (stride > 1) {
        // A stride sharing a factor with the row or slice length would sample a few columns only.
        const std::int64_t row = volume.geometry.size[0];
        const std::int64_t slice = row * volume.geometry.size[1];
        while (std::gcd(stride, row) != 1 || std::gcd(stride, slice) != 1) ++stride;
    }
    std::vector<float> values;
    values.reserve(static_cast<std::size_t>(count / stride + 1));
    for (std::int64_t index = 0; index < count; index += stride) values.push_back(data[index]);
    return fromValues(std::move(values));
}

double IntensityDistribution::minimum() const { return m_sorted.empty() ? 0.0 : m_sorted.front(); }
double IntensityDistribution::maximum() const { return m_sorted.empty() ? 0.0 : m_sorted.back(); }

double IntensityDistribution::percentile(double percent) const {
    if (m_sorted.empty()) return 0.0;
    const double position = std::clamp(percent, 0.0, 100.0) / 100.0 * static_cast<double>(m_sorted.size() - 1);
    const auto below = static_cast<std::size_t>(std::floor(position));
    const std::size_t above = std::min(below + 1, m_sorted.size() - 1);
    const double t = position - static_cast<double>(below);
    return (1.0 - t) * m_sorted[below] + t * m_sorted[above];
}

// ---- TransferFunctionPreset --------------------------------------------------------------------

TransferFunctionPreset TransferFunctionPreset::resolved(const IntensityDistribution& intensities) const {
    if (range == TransferFunctionRange::Absolute) return *this;
    TransferFunctionPreset result = *this;
    const double lower = intensities.percentile(lower_percentile);
    // A constant volume has no span; keep the points apart so VTK's functions stay well defined.
    const double span = std::max(intensities.percentile(upper_percentile) - lower, 1e-6);
    for (ColorPoint& point : result.color) point.value = lower + point.value * span;
    for (OpacityPoint& point : result.opacity) point.value = lower + point.value * span;
    for (OpacityPoint& point : result.gradient_opacity) point.value *= span;  // a gradient has no offset
    result.range = TransferFunctionRange::Absolute;
    return result;
}

// ---- Reading -----------------------------------------------------------------------------------

namespace {

constexpr const char* format_tag = "tessera.transfer_function/1";

// Reads one JSON preset, naming the source and the field path in every error.
class PresetReader {
public:
    explicit PresetReader(const QString& source) : m_source(source.toStdString()) {}

    [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
        TESSERA_REJECT(m_source << ": field '" << field << "' " << problem);
    }

    void checkKnownKeys(const QJsonObject& object, const std::string& where,
                        const std::set<QString>& known) const {
        for (const QString& key : object.keys()) {
            if (!known.contains(key)) {
                const std::string field = where.empty() ? key.toStdString() : where + "." + key.toStdString();
                std::string expected;
                for (const QString& name : known) expected += (expected.empty() ? "" : ", ") + name.toStdString();
                fail(field, "is not a known field (expected one of: " + expected + ")");
            }
        }
    }

    QJsonValue required(const QJsonObject& object, const QString& key, const std::string& field) const {
        if (!object.contains(key)) fail(field, "is missing");
        return object.value(key);
    }

    QString string(const QJsonValue& value, const std::string& field) const {
        if (!value.isString()) fail(field, "must be a string, got " + describe(value));
        return value.toString();
    }

    double number(const QJsonValue& value, const std::string& field) const {
        if (!value.isDouble()) fail(field, "must be a number, got " + describe(value));
        return value.toDouble();
    }

    double unitNumber(const QJsonValue& value, const std::string& field) const {
        const double result = number(value, field);
        if (result < 0.0 || result > 1.0) fail(field, "must be between 0 and 1, got " + std::to_string(result));
        return result;
    }

    double nonNegativeNumber(const QJsonValue& value, const std::string& field) const {
        const double result = number(value, field);
        if (result < 0.0) fail(field, "must not be negative, got " + std::to_string(result));
        return result;
    }

    bool boolean(const QJsonValue& value, const std::string& field) const {
        if (!value.isBool()) fail(field, "must be true or false, got " + describe(value));
        return value.toBool();
    }

    QJsonObject object(const QJsonValue& value, const std::string& field) const {
        if (!value.isObject()) fail(field, "must be an object, got " + describe(value));
        return value.toObject();
    }

    QJsonArray pointList(const QJsonValue& value, const std::string& field) const {
        if (!value.isArray()) fail(field, "must be a list of points, got " + describe(value));
        const QJsonArray array = value.toArray();
        if (array.isEmpty()) fail(field, "must have at least one point");
        return array;
    }

    std::vector<ColorPoint> colorPoints(const QJsonValue& value, const std::string& field) const {
        std::vector<ColorPoint> points;
        const QJsonArray array = pointList(value, field);
        for (qsizetype index = 0; index < array.size(); ++index) {
            const std::string where = field + "[" + std::to_string(index) + "]";
            const QJsonObject point = object(array[index], where);
            checkKnownKeys(point, where, {"value", "rgb"});
            ColorPoint result;
            result.value = number(required(point, "value", where + ".value"), where + ".value");
            const QJsonValue rgb = required(point, "rgb", where + ".rgb");
            if (!rgb.isArray() || rgb.toArray().size() != 3) {
                fail(where + ".rgb", "must be a list of 3 numbers in 0..1, got " + describe(rgb));
            }
            for (int c = 0; c < 3; ++c) {
                result.rgb[static_cast<std::size_t>(c)] =
                    unitNumber(rgb.toArray()[c], where + ".rgb[" + std::to_string(c) + "]");
            }
            points.push_back(result);
        }
        checkIncreasing(points, field);
        return points;
    }

    std::vector<OpacityPoint> opacityPoints(const QJsonValue& value, const std::string& field) const {
        std::vector<OpacityPoint> points;
        const QJsonArray array = pointList(value, field);
        for (qsizetype index = 0; index < array.size(); ++index) {
            const std::string where = field + "[" + std::to_string(index) + "]";
            const QJsonObject point = object(array[index], where);
            checkKnownKeys(point, where, {"value", "opacity"});
            OpacityPoint result;
            result.value = number(required(point, "value", where + ".value"), where + ".value");
            result.opacity = unitNumber(required(point, "opacity", where + ".opacity"), where + ".opacity");
            points.push_back(result);
        }
        checkIncreasing(points, field);
        return points;
    }

private:
    template <class Point>
    void checkIncreasing(const std::vector<Point>& points, const std::string& field) const {
        for (std::size_t index = 1; index < points.size(); ++index) {
            if (!(points[index].value > points[index - 1].value)) {
                fail(field + "[" + std::to_string(index) + "].value",
                     "must be greater than the previous point's value (" +
                         std::to_string(points[index - 1].value) + "), got " + std::to_string(points[index].value));
            }
        }
    }

    static std::string describe(const QJsonValue& value) {
        switch (value.type()) {
            case QJsonValue::Null: return "null";
            case QJsonValue::Bool: return value.toBool() ? "true" : "false";
            case QJsonValue::Double: return std::to_string(value.toDouble());
            case QJsonValue::String: return "\"" + value.toString().toStdString() + "\"";
            case QJsonValue::Array: return "a list of " + std::to_string(value.toArray().size());
            case QJsonValue::Object: return "an object";
            case QJsonValue::Undefined: return "nothing";
        }
        return "?";
    }

    std::string m_source;
};

// 1-based line and column of a byte offset, for parse errors.
std::pair<int, int> lineAndColumn(const QByteArray& text, qsizetype offset) {
    int line = 1;
    int column = 1;
    for (qsizetype index = 0; index < std::min(offset, text.size()); ++index) {
        if (text[index] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return {line, column};
}

}  // namespace

TransferFunctionPreset loadTransferFunctionPreset(const QByteArray& json, const QString& source) {
    QJsonParseError parse_error;
    const QJsonDocument document = QJsonDocument::fromJson(json, &parse_error);
    if (parse_error.error != QJsonParseError::NoError) {
        const auto [line, column] = lineAndColumn(json, parse_error.offset);
        TESSERA_REJECT(source.toStdString() << ": not valid JSON at line " << line << ", column " << column << ": "
                                            << parse_error.errorString().toStdString());
    }
    TESSERA_CHECK(document.isObject(), source.toStdString() << ": expected a JSON object at the top level");

    const PresetReader reader(source);
    const QJsonObject root = document.object();
    reader.checkKnownKeys(root, "",
                          {"format", "name", "description", "range", "color", "opacity", "gradient_opacity",
                           "shading", "opacity_unit_distance"});

    const QString format = reader.string(reader.required(root, "format", "format"), "format");
    if (format != format_tag) {
        reader.fail("format", "must be \"" + std::string(format_tag) + "\", got \"" + format.toStdString() + "\"");
    }

    TransferFunctionPreset preset;
    preset.id = QFileInfo(source).completeBaseName();
    preset.name = reader.string(reader.required(root, "name", "name"), "name");
    if (preset.name.trimmed().isEmpty()) reader.fail("name", "must not be empty");
    if (root.contains("description")) preset.description = reader.string(root["description"], "description");

    const QJsonObject range = reader.object(reader.required(root, "range", "range"), "range");
    const QString mode = reader.string(reader.required(range, "mode", "range.mode"), "range.mode");
    if (mode == "absolute") {
        reader.checkKnownKeys(range, "range", {"mode", "unit"});
        preset.range = TransferFunctionRange::Absolute;
        if (range.contains("unit")) preset.unit = reader.string(range["unit"], "range.unit");
    } else if (mode == "percentile") {
        reader.checkKnownKeys(range, "range", {"mode", "lower_percentile", "upper_percentile"});
        preset.range = TransferFunctionRange::Percentile;
        for (auto [key, target] : {std::pair{"lower_percentile", &preset.lower_percentile},
                                   std::pair{"upper_percentile", &preset.upper_percentile}}) {
            if (!range.contains(key)) continue;
            const std::string field = std::string("range.") + key;
            *target = reader.number(range[key], field);
            if (*target < 0.0 || *target > 100.0) {
                reader.fail(field, "must be a percentile between 0 and 100, got " + std::to_string(*target));
            }
        }
        if (!(preset.lower_percentile < preset.upper_percentile)) {
            reader.fail("range.upper_percentile", "must be greater than range.lower_percentile");
        }
    } else {
        reader.fail("range.mode", "must be \"absolute\" or \"percentile\", got \"" + mode.toStdString() + "\"");
    }

    preset.color = reader.colorPoints(reader.required(root, "color", "color"), "color");
    preset.opacity = reader.opacityPoints(reader.required(root, "opacity", "opacity"), "opacity");
    if (root.contains("gradient_opacity")) {
        preset.gradient_opacity = reader.opacityPoints(root["gradient_opacity"], "gradient_opacity");
        if (preset.gradient_opacity.front().value < 0.0) {
            reader.fail("gradient_opacity[0].value", "must not be negative (it is a gradient magnitude)");
        }
    }

    if (root.contains("shading")) {
        const QJsonObject shading = reader.object(root["shading"], "shading");
        reader.checkKnownKeys(shading, "shading", {"enabled", "ambient", "diffuse", "specular", "specular_power"});
        if (shading.contains("enabled")) preset.shading = reader.boolean(shading["enabled"], "shading.enabled");
        if (shading.contains("ambient")) preset.ambient = reader.unitNumber(shading["ambient"], "shading.ambient");
        if (shading.contains("diffuse")) preset.diffuse = reader.unitNumber(shading["diffuse"], "shading.diffuse");
        if (shading.contains("specular")) {
            preset.specular = reader.unitNumber(shading["specular"], "shading.specular");
        }
        if (shading.contains("specular_power")) {
            preset.specular_power = reader.nonNegativeNumber(shading["specular_power"], "shading.specular_power");
        }
    }
    if (root.contains("opacity_unit_distance")) {
        preset.opacity_unit_distance = reader.number(root["opacity_unit_distance"], "opacity_unit_distance");
        if (!(preset.opacity_unit_distance > 0.0)) {
            reader.fail("opacity_unit_distance", "must be a positive distance in mm");
        }
    }
    return preset;
}

TransferFunctionPreset loadTransferFunctionPreset(const QString& path) {
    QFile file(path);
    TESSERA_CHECK(file.open(QIODevice::ReadOnly),
                  "cannot read transfer function preset " << path.toStdString() << ": "
                                                          << file.errorString().toStdString());
    return loadTransferFunctionPreset(file.readAll(), path);
}

std::vector<TransferFunctionPreset> builtinTransferFunctionPresets() {
    // The order of the preset box: the usual choice for each modality first.
    static const QStringList preferred_order = {"ct_soft_tissue", "ct_bone", "mri_default", "mri_brain"};
    const QDir directory(":/transfer_functions");
    QStringList files = directory.entryList({"*.json"}, QDir::Files, QDir::Name);
    const auto rank = [](const QString& file) {
        const qsizetype index = preferred_order.indexOf(QFileInfo(file).completeBaseName());
        return index < 0 ? preferred_order.size() : index;
    };
    std::stable_sort(files.begin(), files.end(),
                     [&](const QString& a, const QString& b) { return rank(a) < rank(b); });
    std::vector<TransferFunctionPreset> presets;
    for (const QString& file : files) presets.push_back(loadTransferFunctionPreset(directory.filePath(file)));
    return presets;
}

int findTransferFunctionPreset(const std::vector<TransferFunctionPreset>& presets, const QString& id) {
    for (std::size_t index = 0; index < presets.size(); ++index) {
        if (presets[index].id == id) return static_cast<int>(index);
    }
    return -1;
}

}  // namespace tessera::ui
