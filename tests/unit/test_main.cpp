// Catch2's main for the single-process unit tests (unit_tests).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
