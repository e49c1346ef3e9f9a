#include "train/reduction_order.hpp"

#include "core/error.hpp"

namespace tessera::train {

std::string_view reduction_order_name(ReductionOrder order) {
    return order == ReductionOrder::Reproducible ? "reproducible" : "fast";
}

ReductionOrder parse_reduction_order(std::string_view text) {
    if (text == "reproducible") return ReductionOrder::Reproducible;
    if (text == "fast") return ReductionOrder::Fast;
    TESSERA_REJECT("the reduction is \"reproducible\" (gradients summed in core order: the same bits whatever the number of "
                   "ranks) or \"fast\" (the MPI library's all-reduce), got \""
                   << text << "\"");
}

}  // namespace tessera::train
