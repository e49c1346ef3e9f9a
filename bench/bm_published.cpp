// bm_published: the cost model against published training speeds (resources/validation/).
//
//   build/bench/bm_published [folder]
//
// One line per case — `case=<name> predicted=<ms> published=<ms> error=<percent>% device=<id> cores=<n>`
// and the approximations its model needed — then the summary: how many within 25 %, the median |error|
// and the bias (median signed error). Nothing is fitted here: the presets' figures come from data
// sheets, and these cases are for checking them.
#include "experiment/published.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    using namespace tessera;
    const std::filesystem::path folder = argc > 1 ? argv[1] : TESSERA_SOURCE_DIR "/resources/validation";
    const std::vector<experiment::PublishedCase> cases = experiment::load_published_cases(folder);
    std::vector<double> errors;
    for (const experiment::PublishedCase& c : cases) {
        const experiment::PublishedPrediction p = experiment::predict_published(c);
        std::string notes;
        for (const std::string& approximation : c.approximations) notes += (notes.empty() ? " approximations: " : "; ") + approximation;
        if (!p.plan.valid || !p.plan.fits) notes += " [planner: " + p.plan.verdict + "]";
        std::printf("case=%s predicted=%.2fms published=%.2fms error=%+.1f%% device=%s cores=%lld%s\n", c.name.c_str(),
                    p.predicted_step_seconds * 1e3, c.published_step_seconds * 1e3, p.error * 100, c.device.c_str(),
                    static_cast<long long>(c.num_cores), notes.c_str());
        errors.push_back(p.error);
    }
    if (errors.empty()) return 1;
    std::vector<double> magnitudes;
    for (double e : errors) magnitudes.push_back(std::abs(e));
    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const auto within = std::count_if(magnitudes.begin(), magnitudes.end(), [](double m) { return m <= 0.25; });
    std::printf("summary: %zu cases, %lld within 25%% (%.0f%%), median |error| %.1f%%, bias (median error) %+.1f%%\n", errors.size(),
                static_cast<long long>(within), 100.0 * static_cast<double>(within) / static_cast<double>(errors.size()),
                100 * median(magnitudes), 100 * median(errors));
    return 0;
}
