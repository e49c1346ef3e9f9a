#include "core/error.hpp"

#include <gtest/gtest.h>

using tessera::Error;

TEST(Error, CheckThrowsInvalidInputWithTheMessageOnly) {
    const int extent = 37;
    try {
        TESSERA_CHECK(extent % 2 == 0, "expected tile extent divisible by 2, got " << extent);
        FAIL() << "TESSERA_CHECK did not throw";
    } catch (const Error& error) {
        EXPECT_EQ(error.kind(), Error::Kind::InvalidInput);
        EXPECT_STREQ(error.what(), "expected tile extent divisible by 2, got 37");
    }
}

TEST(Error, AssertThrowsInternalWithConditionAndLocation) {
    try {
        TESSERA_ASSERT(1 + 1 == 3, "arithmetic is broken");
        FAIL() << "TESSERA_ASSERT did not throw";
    } catch (const Error& error) {
        EXPECT_TRUE(error.is_internal());
        const std::string message = error.what();
        EXPECT_NE(message.find("1 + 1 == 3"), std::string::npos) << message;
        EXPECT_NE(message.find("arithmetic is broken"), std::string::npos) << message;
        EXPECT_NE(message.find("test_error.cpp"), std::string::npos) << message;
    }
}

TEST(Error, PassingChecksDoNotThrow) {
    EXPECT_NO_THROW(TESSERA_CHECK(true, "never"));
    EXPECT_NO_THROW(TESSERA_ASSERT(true, "never"));
}

TEST(Error, RejectIsBadInputAndFailIsABug) {
    try {
        TESSERA_REJECT("expected sgd, adam or adamw, got 'rmsprop'");
        FAIL() << "TESSERA_REJECT did not throw";
    } catch (const Error& error) {
        EXPECT_EQ(error.kind(), Error::Kind::InvalidInput);
        EXPECT_STREQ(error.what(), "expected sgd, adam or adamw, got 'rmsprop'");
    }
    try {
        TESSERA_FAIL("unknown PlacementKind " << 7);
        FAIL() << "TESSERA_FAIL did not throw";
    } catch (const Error& error) {
        EXPECT_TRUE(error.is_internal());
        EXPECT_NE(std::string(error.what()).find("unknown PlacementKind 7"), std::string::npos) << error.what();
    }
}
