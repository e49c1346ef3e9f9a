// Text forms: to_string and the parser of TPUConfig's input_partition_dims syntax.
#include "partition/partition_spec.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tessera::partition {
namespace {

std::string parse_error(std::string_view text) {
    try {
        parse_input_partition(text);
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a parse error for: " << text;
    return {};
}

std::string parse_pair_error(std::string_view text) {
    try {
        parse_input_partition_dims(text);
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a parse error for: " << text;
    return {};
}

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE((text).find(part), std::string::npos) << "missing \"" << (part) << "\" in:\n" << (text)

// ---- to_string ---------------------------------------------------------------------------------

TEST(PartitionText, PrintsAsWrittenInTPUConfig) {
    EXPECT_EQ(to_string(InputPartition::of({1, 4, 1, 1})), "[1, 4, 1, 1]");
    EXPECT_EQ(to_string(InputPartition::none()), "None");
    EXPECT_EQ(to_string(InputPartition::of({})), "[]");
    EXPECT_EQ(to_string(InputPartition::dict(
                  {{"mask", TensorPartition::none()}, {"image", TensorPartition::of({1, 2, 2, 1})}})),
              "{'image': [1, 2, 2, 1], 'mask': None}");
    EXPECT_EQ(to_string(InputPartition::dict({})), "{}");
    EXPECT_EQ(to_string(InputPartition::dict({{"it's", TensorPartition::of({1})}})), "{'it\\'s': [1]}");
    EXPECT_EQ(to_string(TensorPartition::of({1, 2, 2, 4, 1})), "[1, 2, 2, 4, 1]");

    const PartitionSpec spec{.num_cores_per_replica = 4, .features = InputPartition::of({1, 4, 1, 1})};
    EXPECT_EQ(input_partition_dims_to_string(spec), "[[1, 4, 1, 1], None]");
}

// ---- parsing -----------------------------------------------------------------------------------

TEST(PartitionText, ParsesListsNoneAndDicts) {
    EXPECT_EQ(parse_input_partition("[1, 4, 1, 1]"), InputPartition::of({1, 4, 1, 1}));
    EXPECT_EQ(parse_input_partition("[1,4,1,1]"), InputPartition::of({1, 4, 1, 1}));
    EXPECT_EQ(parse_input_partition("  [ 1 ,4,\t1 , 1, ]  "), InputPartition::of({1, 4, 1, 1}));
    EXPECT_EQ(parse_input_partition("(1, 2, 2, 4, 1)"), InputPartition::of({1, 2, 2, 4, 1}));  // a tuple
    EXPECT_EQ(parse_input_partition("None"), InputPartition::none());
    EXPECT_EQ(parse_input_partition(" None "), InputPartition::none());
    EXPECT_EQ(parse_input_partition("[]"), InputPartition::of({}));
    EXPECT_EQ(parse_input_partition("{}"), InputPartition::dict({}));
    EXPECT_EQ(parse_input_partition("[1, -4, +1, 0]"), InputPartition::of({1, -4, 1, 0}));  // validate() judges

    const InputPartition expected = InputPartition::dict(
        {{"image", TensorPartition::of({1, 4, 1, 1})}, {"image_mask", TensorPartition::of({1, 2, 2, 1})}});
    EXPECT_EQ(parse_input_partition("{'image': [1,4,1,1], 'image_mask': [1, 2, 2,1]}"), expected);
    EXPECT_EQ(parse_input_partition("{\"image\" : [1,4,1,1] ,\n \"image_mask\":[1,2,2,1],}"), expected);
    EXPECT_EQ(parse_input_partition("{'class_label': [1], 'mask': None}"),
              InputPartition::dict({{"class_label", TensorPartition::of({1})}, {"mask", TensorPartition::none()}}));
    EXPECT_EQ(parse_input_partition(R"({'it\'s': [1], "a\"b\\c": None})"),
              InputPartition::dict({{"it's", TensorPartition::of({1})}, {"a\"b\\c", TensorPartition::none()}}));
}

TEST(PartitionText, ErrorsGiveTheColumnAndWhatWasExpected) {
    EXPECT_EQ(parse_error("[1, 4, x]"),
              "cannot parse the input partition \"[1, 4, x]\": column 8: expected an integer "
              "(one dims entry per dimension), found 'x'");
    EXPECT_EQ(parse_error("[1 4]"),
              "cannot parse the input partition \"[1 4]\": column 4: expected ',' or ']' in a list of dims, found '4'");
    EXPECT_CONTAINS(parse_error("[1, 2"), "column 6: expected ',' or ']' in a list of dims, found the end of the text");
    EXPECT_CONTAINS(parse_error("[1, 2] x"), "column 8: expected the end of the text, found 'x'");
    EXPECT_CONTAINS(parse_error("[[1]]"), "column 2: expected an integer (one dims entry per dimension), found '['");
    EXPECT_CONTAINS(parse_error("[1.5]"), "column 3: expected ',' or the end of the list after an integer, found '.'");
    EXPECT_CONTAINS(parse_error("none"),
                    "column 1: expected a list of dims, a dict or None (Python's None is "
                    "capitalised), found 'none'");
    EXPECT_CONTAINS(parse_error("4"), "column 1: expected a list of dims, a dict or None, found '4'");
    EXPECT_CONTAINS(parse_error(""), "column 1: expected a list of dims, a dict or None, found the end of the text");
    EXPECT_CONTAINS(parse_error("[99999999999999999999]"),
                    "column 2: integer out of range (at most 9223372036854775807)");

    // The seed's own example has an unquoted key: {'class_label': [1], mask: None}.
    EXPECT_CONTAINS(parse_error("{'class_label': [1], mask: None}"),
                    "column 22: expected a quoted key such as 'image', found 'mask'");
    EXPECT_CONTAINS(parse_error("{'image' [1]}"), "column 10: expected ':' after the key 'image', found '['");
    EXPECT_CONTAINS(parse_error("{'image': [1] 'mask': None}"), "column 15: expected ',' or '}' in a dict, found '''");
    EXPECT_CONTAINS(parse_error("{'image': 4}"),
                    "column 11: expected a list of dims or None for the key 'image', found '4'");
    EXPECT_CONTAINS(parse_error("{'image': [1], 'image': None}"),
                    "column 16: duplicate key 'image' (first at column 2)");
    EXPECT_CONTAINS(parse_error("{'image: [1]}"), "column 2: unterminated key: expected a closing '");
    EXPECT_CONTAINS(parse_error(R"({'a\n': [1]})"), "column 4: unsupported escape in a key");

    // Several lines: the line too.
    EXPECT_CONTAINS(parse_error("{'image': [1, 4, 1, 1],\n 'mask': Nope}"),
                    "line 2, column 10: expected a list of dims or None for the key 'mask', found 'Nope'");
}

TEST(PartitionText, RoundTrips) {
    const std::vector<InputPartition> values = {
        InputPartition::none(),
        InputPartition::of({1, 4, 1, 1}),
        InputPartition::of({1, 2, 2, 4, 1}),
        InputPartition::of({1}),
        InputPartition::of({}),
        InputPartition::dict({}),
        InputPartition::dict({{"image", TensorPartition::of({1, 2, 2, 1})}, {"mask", TensorPartition::none()}}),
        InputPartition::dict({{"it's \\ odd", TensorPartition::of({1, 4})}, {"\"q\"", TensorPartition::none()}}),
    };
    for (const InputPartition& value : values) {
        const std::string text = to_string(value);
        EXPECT_EQ(parse_input_partition(text), value) << text;
        EXPECT_EQ(to_string(parse_input_partition(text)), text);
    }
    for (const char* text : {"[1, 4, 1, 1]", "None", "{'image': [1, 2, 2, 1], 'mask': None}", "{'class_label': [1]}"}) {
        EXPECT_EQ(to_string(parse_input_partition(text)), text);
    }
}

// ---- the pair [features_dims, labels_dims] -----------------------------------------------------

TEST(PartitionText, ParsesInputPartitionDims) {
    auto [features, labels] = parse_input_partition_dims("[[1, 4, 1, 1], None]");
    EXPECT_EQ(features, InputPartition::of({1, 4, 1, 1}));
    EXPECT_EQ(labels, InputPartition::none());

    std::tie(features, labels) = parse_input_partition_dims(
        "[{'image': [1,4,1,1], 'image_mask': [1, 2, 2,1]},\n {'class_label': [1], 'mask': None}]");
    EXPECT_EQ(features, InputPartition::dict({{"image", TensorPartition::of({1, 4, 1, 1})},
                                              {"image_mask", TensorPartition::of({1, 2, 2, 1})}}));
    EXPECT_EQ(labels,
              InputPartition::dict({{"class_label", TensorPartition::of({1})}, {"mask", TensorPartition::none()}}));

    std::tie(features, labels) = parse_input_partition_dims("[{'image': [1,4,1,1], 'image_mask': [1, 2, 2,1]}, [1]]");
    EXPECT_EQ(labels, InputPartition::of({1}));

    std::tie(features, labels) = parse_input_partition_dims("[[1, 2, 2, 1]]");  // labels_dims left out: None
    EXPECT_EQ(features, InputPartition::of({1, 2, 2, 1}));
    EXPECT_EQ(labels, InputPartition::none());

    std::tie(features, labels) = parse_input_partition_dims("[None, None,]");
    EXPECT_EQ(features, InputPartition::none());

    const PartitionSpec spec{.num_cores_per_replica = 4,
                             .features = InputPartition::dict({{"image", TensorPartition::of({1, 2, 2, 1})}}),
                             .labels = InputPartition::of({1})};
    const auto round = parse_input_partition_dims(input_partition_dims_to_string(spec));
    EXPECT_EQ(round.first, spec.features);
    EXPECT_EQ(round.second, spec.labels);
}

TEST(PartitionText, InputPartitionDimsErrors) {
    EXPECT_CONTAINS(parse_pair_error("[1, 4, 1, 1]"),
                    "column 2: expected features_dims: a list, a dict or None, found '1'");
    EXPECT_CONTAINS(parse_pair_error("[]"), "column 2: expected features_dims: a list, a dict or None, found ']'");
    EXPECT_CONTAINS(parse_pair_error("None"),
                    "column 1: expected '[' opening input_partition_dims = [features_dims, labels_dims], found 'None'");
    EXPECT_CONTAINS(parse_pair_error("[[1, 4, 1, 1], None, None]"),
                    "column 22: expected ']' closing input_partition_dims, which has at most two elements "
                    "[features_dims, labels_dims], found 'None'");
    // The seed's TPUConfig line has one ']' too many.
    EXPECT_CONTAINS(parse_pair_error("[[1, 4, 1, 1], None]]"), "column 21: expected the end of the text, found ']'");
}

}  // namespace
}  // namespace tessera::partition
