#include "metrics/stats.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "metrics/records.h"

namespace normlab {
namespace {

// Continued fraction of the regularised incomplete beta function (modified Lentz).
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < eps) break;
  }
  return h;
}

// I_x(a, b).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_cf(a, b, x) / a;
  return 1 - front * beta_cf(b, a, 1 - x) / b;
}

// The intervals and p of delta with standard error se on df degrees of freedom.
void fill(TTest& t) {
  if (t.se == 0) {
    t.df = kNaN;
    t.p = t.delta != 0 ? 0 : 1;
    t.ci95_low = t.ci95_high = t.ci90_low = t.ci90_high = t.delta;
    return;
  }
  t.p = 2 * student_t_cdf(-std::fabs(t.delta / t.se), t.df);
  const double h95 = student_t_quantile(0.975, t.df) * t.se;
  const double h90 = student_t_quantile(0.95, t.df) * t.se;
  t.ci95_low = t.delta - h95;
  t.ci95_high = t.delta + h95;
  t.ci90_low = t.delta - h90;
  t.ci90_high = t.delta + h90;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));  // P(T > |t|)
  return t > 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0)) return kNaN;
  double lo = -1, hi = 1;
  while (student_t_cdf(lo, df) > p) lo *= 2;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * std::max(1.0, std::fabs(hi)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

TTest welch_test(const std::vector<double>& a, const std::vector<double>& b) {
  TTest t;
  const SeedStats sa = seed_stats(a), sb = seed_stats(b);
  t.delta = sa.mean - sb.mean;
  t.n = std::min(sa.n, sb.n);
  if (sa.n < 2 || sb.n < 2) return t;  // no variance estimate: unbounded
  const double na = static_cast<double>(sa.n), nb = static_cast<double>(sb.n);
  const double qa = sa.std * sa.std / na, qb = sb.std * sb.std / nb;
  t.se = std::sqrt(qa + qb);
  if (t.se > 0) t.df = (qa + qb) * (qa + qb) / (qa * qa / (na - 1) + qb * qb / (nb - 1));
  fill(t);
  return t;
}

TTest paired_test(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isfinite(a[i]) && std::isfinite(b[i])) d.push_back(a[i] - b[i]);
  }
  TTest t;
  const SeedStats sd = seed_stats(d);
  t.delta = sd.mean;
  t.n = sd.n;
  if (sd.n < 2) return t;
  t.se = sd.std / std::sqrt(static_cast<double>(sd.n));
  t.df = static_cast<double>(sd.n - 1);
  fill(t);
  return t;
}

double minimum_detectable_effect(const TTest& t) {
  if (t.se == 0) return 0;
  if (!std::isfinite(t.se) || !(t.df > 0)) return kNaN;
  return (student_t_quantile(0.975, t.df) + student_t_quantile(0.80, t.df)) * t.se;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!std::isnan(p[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p[x] < p[y]; });
  std::vector<double> out(p.size(), kNaN);
  const double k = static_cast<double>(order.size());
  double running = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    running = std::max(running, std::min(1.0, p[order[j]] * (k - static_cast<double>(j))));
    out[order[j]] = running;
  }
  return out;
}

std::string decide(const TTest& t, double p_adj, double margin) {
  const bool significant = p_adj < 0.05;
  if (t.bounded() && significant && t.ci95_high < 0) return "better";
  if (t.bounded() && significant && t.ci95_low > 0) return "worse";
  if (!(margin > 0)) return "tie";
  const bool inside = std::isfinite(t.ci90_low) && t.ci90_low >= -margin && t.ci90_high <= margin;
  return inside ? "equivalent" : "inconclusive";
}

double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double nan = std::nan("");
  if (x.size() != y.size() || x.size() < 2) return nan;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return nan;
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(x.size());
  my /= static_cast<double>(x.size());
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : nan;
}

}  // namespace normlab
