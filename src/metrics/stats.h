// The statistics behind every verdict NormLab prints (src/metrics/README.md, "Tests and
// verdicts"): Student's t distribution, Welch's and the paired t test with their intervals, the
// smallest effect a test detects, Holm's step-down correction and the verdict rule with an
// equivalence margin. The tuned sweeps (src/sweep/tune.h) and `normlab compare --by` take them
// from here and compute none of their own.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace normlab {

// A missing number (no value, no variance estimate, an unbounded interval).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The median (the mean of the two middle values when there is an even number of them); NaN when
// v is empty.
double median(std::vector<double> v);

// Student's t distribution (regularised incomplete beta by Lentz's continued fraction).
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);  // 0 < p < 1

// Least-squares slope of y against x (the transfer audit's and the coordinate check's fits); NaN
// with fewer than two distinct x or any non-finite value.
double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y);

// A two-sided t test of a difference: delta (a - b), its standard error and degrees of freedom,
// p, and the 95 % and 90 % intervals delta -+ t_{q,df} se. se = 0: p = 0 and every interval
// [delta, delta] when delta != 0, else p = 1 (df NaN). Without a variance estimate (fewer than 2
// values on a side, or fewer than 2 pairs) se, df, p and the intervals are NaN (unbounded).
struct TTest {
  double delta = std::nan(""), se = std::nan(""), df = std::nan(""), p = std::nan("");
  double ci95_low = std::nan(""), ci95_high = std::nan("");
  double ci90_low = std::nan(""), ci90_high = std::nan("");
  int64_t n = 0;  // values per side (Welch: the smaller side) or pairs
  bool bounded() const { return std::isfinite(ci95_low) && std::isfinite(ci95_high); }
};

// Welch: delta = mean(a) - mean(b), se = sqrt(s_a^2/n_a + s_b^2/n_b), Welch-Satterthwaite df.
// Non-finite values are left out (seed_stats).
TTest welch_test(const std::vector<double>& a, const std::vector<double>& b);
// Paired: the differences d_i = a[i] - b[i] over the indices where both are finite; delta =
// mean(d), se = sd(d) / sqrt(n), df = n - 1.
TTest paired_test(const std::vector<double>& a, const std::vector<double>& b);

// The smallest |delta| the test detects with 80 % power at its own se and df (two-sided, 5 %):
// (t_{0.975,df} + t_{0.80,df}) se; 0 when se = 0, NaN when unbounded.
double minimum_detectable_effect(const TTest& t);

// Holm's step-down adjustment of k p values: sorted ascending, p_(j) (k - j + 1), made
// non-decreasing, capped at 1, returned in the input's order. NaN entries are not tests: they
// stay NaN and do not count in k.
std::vector<double> holm_adjust(const std::vector<double>& p);

// The verdict of a decided test (its adjusted p beside it; with no correction p_adj = p):
//   better / worse: the 95 % interval lies below / above 0 and p_adj < 0.05;
//   with margin > 0: equivalent when the 90 % interval lies inside [-margin, margin] (two
//   one-sided tests at 5 %), else inconclusive; with margin 0: tie.
std::string decide(const TTest& t, double p_adj, double margin);

}  // namespace normlab
