// picotron/format.h — numbers as a person reads them, in every summary and error line.
//
//   with_commas(1234567) -> "1,234,567"     human_bytes(1536)  -> "1.50 KiB"
//   shape_text({2, 3})   -> "[2, 3]"        seconds_text(1.234) -> "1.23 s"
//
// Test: build/tests/unit_tests "[format]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace picotron {

std::string with_commas(int64_t n);
std::string shape_text(const std::vector<int64_t>& shape);
std::string human_bytes(double bytes);  // binary units: KiB, MiB, GiB, TiB
std::string seconds_text(double seconds);

}  // namespace picotron
