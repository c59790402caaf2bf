// Placeholder: tests land in a following commit.
#include <gtest/gtest.h>
