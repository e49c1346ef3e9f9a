#include "data/folder_pairs.hpp"

#include "core/error.hpp"
#include "io/volume_io.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace tessera::data {
namespace {

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

// Appended rather than "'" + text + "'": GCC 12 reports a false -Wrestrict for the latter.
std::string quoted(const std::filesystem::path& path) {
    std::string text = "'";
    text += path.string();
    text += '\'';
    return text;
}

std::string joined(const std::vector<std::string>& items, std::size_t limit = 5) {
    std::string text;
    for (std::size_t i = 0; i < items.size() && i < limit; ++i) text += (i == 0 ? "" : ", ") + items[i];
    if (items.size() > limit) text += ", ... (" + std::to_string(items.size()) + " in all)";
    return text;
}

// Volume files in `folder`, by file name; sorted so errors name the same file everywhere.
std::vector<std::filesystem::path> volume_files_in(const std::filesystem::path& folder, const char* what) {
    std::error_code error;
    TESSERA_CHECK(std::filesystem::is_directory(folder, error),
                  "the " << what << " folder " << quoted(folder)
                         << (std::filesystem::exists(folder, error) ? " is not a folder" : " does not exist")
                         << ": set data." << what << " to the folder holding the " << what << " files");
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name.front() == '.' || !entry.is_regular_file(error)) continue;
        if (!volume_file_stem(entry.path()).empty()) files.push_back(entry.path());
    }
    TESSERA_CHECK(!error, "cannot list the " << what << " folder " << quoted(folder) << ": " << error.message());
    std::sort(files.begin(), files.end());
    return files;
}

std::string extensions_list() {
    std::string text;
    for (const std::string& extension : supported_volume_extensions()) text += (text.empty() ? "" : " ") + extension;
    return text;
}

}  // namespace

std::string volume_file_stem(const std::filesystem::path& path) {
    const std::string name = path.filename().string();
    const std::string lowered = lower(name);
    std::size_t longest = 0;  // ".nii.gz" rather than ".gz"
    for (const std::string& extension : supported_volume_extensions()) {
        if (lowered.size() > extension.size() && lowered.ends_with(extension)) longest = std::max(longest, extension.size());
    }
    return longest == 0 ? std::string() : name.substr(0, name.size() - longest);
}

std::string strip_label_suffix(const std::string& stem, bool& had_suffix) {
    const std::string lowered = lower(stem);
    for (const char* suffix : {"_labels", "_label", "_mask", "_seg"}) {
        const std::string text = suffix;
        if (lowered.size() > text.size() && lowered.ends_with(text)) {
            had_suffix = true;
            return stem.substr(0, stem.size() - text.size());
        }
    }
    had_suffix = false;
    return stem;
}

std::vector<FilePair> match_folder_pairs(const std::filesystem::path& images_dir,
                                         const std::filesystem::path& labels_dir) {
    std::error_code error;
    const bool shared_folder = labels_dir.empty() || std::filesystem::equivalent(images_dir, labels_dir, error);
    const std::vector<std::filesystem::path> image_candidates = volume_files_in(images_dir, "images");
    const std::vector<std::filesystem::path> label_candidates =
        shared_folder ? image_candidates : volume_files_in(labels_dir, "labels");
    const std::filesystem::path& label_folder = shared_folder ? images_dir : labels_dir;

    std::map<std::string, std::filesystem::path> images, labels;
    for (const std::filesystem::path& file : image_candidates) {
        bool is_label = false;
        const std::string stem = volume_file_stem(file);
        strip_label_suffix(stem, is_label);
        if (shared_folder && is_label) continue;
        const auto [place, inserted] = images.emplace(stem, file);
        TESSERA_CHECK(inserted, "two images in " << quoted(images_dir) << " are both named '" << stem << "': "
                                                  << place->second.filename().string() << " and "
                                                  << file.filename().string() << ". Keep one of them.");
    }
    for (const std::filesystem::path& file : label_candidates) {
        bool had_suffix = false;
        const std::string key = strip_label_suffix(volume_file_stem(file), had_suffix);
        if (shared_folder && !had_suffix) continue;
        const auto [place, inserted] = labels.emplace(key, file);
        TESSERA_CHECK(inserted, "two label files in " << quoted(label_folder) << " match the image '" << key
                                                       << "': " << place->second.filename().string() << " and "
                                                       << file.filename().string() << ". Keep one of them.");
    }

    TESSERA_CHECK(!images.empty(),
                  "no images found in " << quoted(images_dir) << " (looked for " << extensions_list() << ")"
                                        << (shared_folder && !labels.empty() ? "; every file there has a label suffix" : "")
                                        << ". Put the training images there or set data.images to their folder.");
    std::vector<FilePair> pairs;
    std::vector<std::string> unpaired_images;
    for (const auto& [stem, image] : images) {
        const auto label = labels.find(stem);
        if (label == labels.end()) {
            unpaired_images.push_back(image.filename().string());
            continue;
        }
        pairs.push_back(FilePair{stem, image, label->second});
    }
    if (!unpaired_images.empty()) {
        std::vector<std::string> unpaired_labels;
        for (const auto& [key, label] : labels) {
            if (!images.contains(key)) unpaired_labels.push_back(label.filename().string());
        }
        const std::string first = volume_file_stem(unpaired_images.front());
        TESSERA_REJECT("no label file for " << (unpaired_images.size() == 1 ? "the image " : "the images ")
                                            << joined(unpaired_images) << " in " << quoted(images_dir) << ": expected "
                                            << quoted(label_folder / (first + "_mask" + std::string(unpaired_images.front()).substr(first.size())))
                                            << (shared_folder ? "" : " or the same name without the suffix")
                                            << " (suffixes _label, _labels, _mask, _seg)"
                                            << (unpaired_labels.empty() ? "" : "; labels without an image: " + joined(unpaired_labels))
                                            << ". Add the labels or move the unlabelled images out of the folder.");
    }
    return pairs;
}

}  // namespace tessera::data
