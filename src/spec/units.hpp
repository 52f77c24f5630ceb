#pragma once
// Binary byte units (IEC: 1 GiB = 2^30 bytes), the unit every memory figure is reported in.
namespace meshplan {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * kKiB;
constexpr double kGiB = 1024.0 * kMiB;

}  // namespace meshplan
