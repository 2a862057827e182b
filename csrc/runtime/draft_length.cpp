#include "runtime/draft_length.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace glm5next {

namespace {

// Prior before any round was seen: draft 1 accepted half the time (weight of one round); later positions start
// from the estimate of the position before (acceptance after an accepted draft is rarely lower: measured on the
// bundled model, code and prose, per-position acceptance 0.55 0.62 0.66 at n_max 3).
constexpr double kPriorAccept = 0.5, kPriorWeight = 1.0;
// The built-in prior's slope per verify row, in one-row verifies (RoundCostPrior; an assumption: ~+0.15 was measured
// on the bundled model q8_0 at -t 1 then, 0.4-0.9 on this project's CPUs since: issue 28).
constexpr double kPriorRowSlope = 0.25;
// A row count's own estimate counts once it has this many samples; before, the others' line stands for it (one
// sample may be an outlier, and a row count only the choice of k measures would keep it for good).
constexpr size_t kTrusted = 3;
// The most rounds without drafts a new policy opens with, until plain decoding was timed kTrusted times (choose).
constexpr int kOpening = 8;
// While drafting pays, kPlainRun rounds without drafts come at least once in kPlainEvery (choose): their cost is what
// drafting is weighed against. Costs at most two drafting rounds' gain per kPlainEvery rounds (~1% where drafting
// gains 20%).
constexpr int kPlainEvery = 32, kPlainRun = 2;
// A sample counts at most this many times the window's median (RecentCost).
constexpr double kClip = 2.0;
// A sample of a drafting round's kind is divided by the median of this many rounds without drafts timed last: a
// median, robust to one preempted round; three, so that where drafting pays (two plain rounds in kPlainEvery, one
// timed) the reference is at most ~100 rounds old.
constexpr size_t kReference = 3;
// Drafting is given up (can_pay, until reconsider) when even fully accepted probes would emit fewer than this many
// times plain decoding's tokens per ms: a small margin, so that a case on the edge (bundled model q8_0 at -t 1: one
// draft fully accepted ~0.97x, three ~1.03x) decodes plainly rather than paying the draft-head rows and probes (~2-3%).
constexpr double kMinGain = 1.05;
// An accepted probe is news (the text changed) when draft 1's estimate was below this: after a run of rejections,
// not on text where drafts are accepted about half the time and probes would then oscillate (held-out code: ~0.66).
constexpr double kNewsBelow = 0.25;
}  // namespace

double RoundCostPrior::verify_ratio(int rows) const {
    if (rows < 1) throw std::invalid_argument("verify_ratio: rows = " + std::to_string(rows) + ": must be >= 1");
    const int n = (int) verify.size();
    if (n == 0) return 1.0 + kPriorRowSlope * (rows - 1);
    if (rows <= n) return verify[rows - 1];
    const double slope = n >= 2 ? std::max(0.0, verify[n - 1] - verify[n - 2]) : kPriorRowSlope;
    return verify[n - 1] + slope * (rows - n);
}

void RoundCostPrior::check() const {
    const auto bad = [](double v) { return !std::isfinite(v) || v <= 0.0; };
    const auto fail = [](const std::string & what, double v) {
        throw std::invalid_argument("round cost prior: " + what + " = " + std::to_string(v) +
                                    ": expected a finite ratio > 0");
    };
    if (bad(first)) fail("first", first);
    if (bad(next)) fail("next", next);
    if (bad(row)) fail("row", row);
    for (size_t i = 0; i < verify.size(); ++i) {
        if (bad(verify[i])) fail("verify[" + std::to_string(i) + "]", verify[i]);
    }
    if (!verify.empty() && verify[0] != 1.0) {
        throw std::invalid_argument("round cost prior: verify[0] = " + std::to_string(verify[0]) +
                                    ": the unit is a one-row verify, so it must be 1");
    }
}

double clipped_mean(const double * samples, size_t n) {
    if (n < 1 || n > kCostWindow) {
        throw std::invalid_argument("clipped_mean of " + std::to_string(n) + " samples: expected 1.." +
                                    std::to_string(kCostWindow));
    }
    std::array<double, kCostWindow> sorted;  // no allocation per round
    std::copy(samples, samples + n, sorted.begin());
    std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
    const double cap = kClip * sorted[n / 2];
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += std::min(samples[i], cap);
    return sum / double(n);
}

void DraftLengthPolicy::RecentCost::add(double sample) {
    if (samples_.size() < kWindow) {
        samples_.push_back(sample);
    } else {
        samples_[next_] = sample;
        next_ = (next_ + 1) % kWindow;
    }
    cost_ = clipped_mean(samples_.data(), samples_.size());
    ++count_;
}

double DraftLengthPolicy::RecentCost::median_of_latest(size_t n) const {
    n = std::min(n, samples_.size());
    if (n == 0) return -1.0;
    std::array<double, kCostWindow> latest;  // the ring's latest n, newest first
    const size_t newest = samples_.size() < kWindow ? samples_.size() - 1 : (next_ + kWindow - 1) % kWindow;
    for (size_t i = 0; i < n; ++i) latest[i] = samples_[(newest + kWindow - i) % kWindow];
    std::nth_element(latest.begin(), latest.begin() + n / 2, latest.begin() + n);
    return latest[n / 2];
}

DraftLengthPolicy::DraftLengthPolicy(int n_max, int n_min, RoundCostPrior prior)
    : n_max_(n_max), n_min_(std::max(n_min, 0)), prior_(std::move(prior)), tried_(std::max(n_max, 0), 0.0),
      kept_(std::max(n_max, 0), 0.0), verify_x_(std::max(n_max, 0)), opening_left_(kOpening) {
    if (n_max < 0) throw std::invalid_argument("draft length policy: n_max = " + std::to_string(n_max) + " < 0");
    prior_.check();
}

double DraftLengthPolicy::next_acceptance(int i, double before) const {
    return (kept_[i] + kPriorWeight * before) / (tried_[i] + kPriorWeight);
}

double DraftLengthPolicy::acceptance(int j) const {
    if (j < 1 || j > n_max_) return 0.0;
    double a = kPriorAccept;
    for (int i = 0; i < j; ++i) a = next_acceptance(i, a);
    return a;
}

double DraftLengthPolicy::expected_tokens(int k) const {
    double e = 1.0, run = 1.0, a = kPriorAccept;
    for (int i = 0; i < std::min(k, n_max_); ++i) {
        a = next_acceptance(i, a);
        run *= a;
        e += run;
    }
    return e;
}

double DraftLengthPolicy::unit() const { return plain_ms_.count() > 0 ? plain_ms_.get() : 1.0; }

double DraftLengthPolicy::reference() const { return plain_ms_.median_of_latest(kReference); }

size_t DraftLengthPolicy::verify_count(int rows) const {
    return rows == 1 ? plain_ms_.count() : verify_x_[rows - 2].count();
}

double DraftLengthPolicy::verify_ratio(int rows) const {
    if (rows == 1) return 1.0;
    if (verify_count(rows) >= kTrusted) return verify_x_[rows - 2].get();
    // Row counts with kTrusted samples (else any measured) as the basis: a least squares line through two or
    // more, the prior's ratios scaled to the one from one, the prior from none.
    size_t min_count = 1;
    for (int r = 1; r <= n_max_ + 1; ++r) {
        if (verify_count(r) >= kTrusted) min_count = kTrusted;
    }
    double n = 0, sr = 0, sv = 0, srr = 0, srv = 0;
    for (int r = 1; r <= n_max_ + 1; ++r) {
        if (verify_count(r) < min_count) continue;
        const double v = r == 1 ? 1.0 : verify_x_[r - 2].get();
        n += 1, sr += r, sv += v, srr += double(r) * r, srv += r * v;
    }
    const auto prior = [this](double r) { return prior_.verify_ratio((int) r); };
    if (n == 0) return prior(rows);
    if (n == 1) return sv * prior(rows) / prior(sr);  // the one basis row count r = sr, its ratio sv
    const double slope = std::max(0.0, (n * srv - sr * sv) / (n * srr - sr * sr));
    const double at0 = (sv - slope * sr) / n;  // the line's value at 0 rows
    return std::max(at0 + slope * rows, 0.5 * sv / n);
}

double DraftLengthPolicy::expected_cost(int k) const {
    const double between = std::max(between_x_.get(), 0.0);
    if (k <= 0) return (1.0 + (row_x_.get() >= 0 ? row_x_.get() : prior_.row) + between) * unit();
    k = std::min(k, n_max_);
    const double first = first_x_.get() >= 0 ? first_x_.get() : prior_.first;
    const double next = next_x_.get() >= 0 ? next_x_.get() : prior_.next;
    return (first + (k - 1) * next + verify_ratio(k + 1) + between) * unit();
}

int DraftLengthPolicy::best(int limit) const {
    limit = std::clamp(limit, 0, n_max_);
    int k_best = 0;
    double best_rate = expected_tokens(0) / expected_cost(0);
    for (int k = shortest(); k <= limit; ++k) {
        const double rate = expected_tokens(k) / expected_cost(k);
        if (rate > best_rate) k_best = k, best_rate = rate;
    }
    return k_best;
}

bool DraftLengthPolicy::refresh_due(int & rounds_since, bool untimed) {
    ++rounds_since;
    if ((untimed && rounds_since >= kProbeFirst) || rounds_since >= kPlainEvery) {
        rounds_since = 0;
        return true;
    }
    return false;
}

bool DraftLengthPolicy::probe_length(int n_drafted, int verify_rows) const {
    return n_drafted == shortest() && verify_rows == shortest() + 1;
}

int DraftLengthPolicy::choose(int limit) {
    limit = std::clamp(limit, 0, n_max_);
    if (quiet_) return 0;  // (its caller runs without the draft head until wake)
    // A new policy opens with rounds without drafts until kTrusted of them were timed (at most kOpening rounds: a
    // round that builds a graph is not timed): plain decoding's cost is then measured before any drafting is weighed
    // against it, not extrapolated from verify passes of several rows by the prior's slope (the bench preset q8_0 at
    // -t 1, synthetic acceptance 2.5: a verify row costs ~0.9 of a decode step, the prior says 0.25, and for the
    // first ~24 rounds plain decoding was priced at 21 ms against 12.5 measured). They cost nothing: they decode as
    // plain decoding does, and a draft head that does not run leaves plain rounds timed as plain decoding.
    if (opening_left_ > 0 && plain_ms_.count() < kTrusted) {
        --opening_left_;
        return 0;
    }
    opening_left_ = 0;
    // Until rounds without drafts were timed kTrusted times, every kProbeFirst rounds kPlainRun rounds have none, so
    // that drafting is weighed against measured plain decoding rather than one extrapolated from verify passes of
    // several rows by the prior's slope (which made a second verify row look like a quarter of a decode step where
    // it costs ~0.85). While drafting pays, kPlainRun rounds in kPlainEvery have none all the same: the machine's
    // speed drifts (2-3x over seconds on a shared one), and plain decoding timed long ago would misprice every
    // choice against it. Only the last of a run is timed (observe: the first runs on caches the draft head left).
    if (plain_left_ > 0) {
        --plain_left_;
        return 0;
    }
    if (refresh_due(rounds_since_plain_, plain_ms_.count() < kTrusted)) {
        plain_left_ = kPlainRun - 1;
        return 0;
    }
    const int k = best(limit);
    if (k == 0) rounds_since_plain_ = 0;
    if (k > 0) {
        rounds_since_draft_ = 0;
        probe_interval_ = kProbeFirst;
        // One draft more now and then: every kProbeFirst rounds while its verify pass is not timed kTrusted times
        // (its cost extrapolated by a line through fewer rows), every kPlainEvery rounds after (its timings age as
        // the machine's speed drifts, and one measured while slow would keep it from ever being chosen): the
        // "predictable" preset at -t 2 settled on 2 drafts, 1.04x plain decoding, where 3 every round gave 1.11x.
        if (k < limit && refresh_due(rounds_since_longer_, verify_count(k + 2) < kTrusted)) return k + 1;
        return k;
    }
    if (limit < shortest()) return 0;
    if (++rounds_since_draft_ < probe_interval_) return 0;
    // A probe: the cheapest draft, so that acceptance (and, until the costs are judged, step 0 and a two-row verify)
    // is measured again. Its expected loss (C(shortest) - C(0) less the tokens it may gain) comes at most once per
    // kProbeFirst rounds, and ever more rarely while probes leave drafting unprofitable (observe doubles the
    // interval); one that makes drafting pay brings the next probe back to kProbeFirst rounds.
    rounds_since_draft_ = 0;
    probing_ = true;
    return shortest();
}

void DraftLengthPolicy::observe(int n_drafted, int n_accepted, int verify_rows, int64_t pending_rows,
                                double first_ms, double next_ms, double verify_ms, double between_ms,
                                int n_chosen) {
    n_drafted = std::clamp(n_drafted, 0, n_max_);
    const bool accepted_probe = probing_ && n_drafted > 0 && n_accepted > 0;
    const bool news = count_round(n_drafted, n_accepted, n_chosen);
    if (verify_ms >= 0) observe_costs(n_drafted, verify_rows, pending_rows, first_ms, next_ms, verify_ms, between_ms);
    drafted_last_ = n_drafted > 0;
    if (probing_) {  // what the probe told, with its timings
        probing_ = false;
        // a probe that drafted nothing or was cut short (p_min, a grammar, n_min) gives can_pay no pair: counted as
        // rejected, or probes would come every kProbeFirst rounds for as long as no judgment could be made
        // While can_pay is not judged, the next probe comes within kProbeFirst rounds (a paired measure more) after an
        // accepted one, or while the pairs so far say drafting cannot pay (a quick judgment stops the draft-head
        // rows: bundled model q8_0, -t 1). A rejected probe where drafting could pay, if accepted, spaces them out as
        // after the judgment: drafting nothing is accepted of needs no judgment of its costs, and nine probes every
        // kProbeFirst rounds each lost ~0.8 of a round (the bench preset q8_0, random weights, at 4 sequences: every
        // batch size's policy paid them in its first ~80 rounds).
        const bool paired = probe_length(n_drafted, verify_rows);
        const bool unjudged = paired && probe_ms_.count() < RecentCost::kWindow;
        const bool could_pay = probe_ms_.count() > 0 && !pairs_miss_min_gain();
        if (news || best(n_max_) > 0 || (unjudged && (accepted_probe || !could_pay))) {
            probe_interval_ = kProbeFirst;  // news, drafting pays now, or the judgment is wanted soon
        } else if (!accepted_probe) {
            probe_interval_ = std::min(2 * probe_interval_, kProbeMost);  // rejected: the next probe waits longer
        }  // accepted as expected, drafting still not paying: the same interval
        if (!accepted_probe && !accepted_probe_would_pay()) quiet_ = true;
    }
}

bool DraftLengthPolicy::count_round(int n_drafted, int n_accepted, int n_chosen) {
    // Decay per round that drafted: rounds without drafts tell nothing new, and decaying then would bring the prior
    // back and with it drafting that was found not to pay (measured: 34 rounds of 256 drafted at zero acceptance).
    // A probe accepted against the estimate's odds (draft 1 estimated below kNewsBelow) is news: the old evidence
    // then counts half, and the next probe comes within kProbeFirst rounds.
    const int tried = std::clamp(std::max(std::clamp(n_drafted, 0, n_max_), n_chosen), 0, n_max_);  // or stopped short
    const bool news = probing_ && n_drafted > 0 && n_accepted > 0 && acceptance(1) < kNewsBelow;
    const double decay = news ? 0.5 : tried > 0 ? std::exp2(-1.0 / kHalfLife) : 1.0;
    for (int i = 0; i < n_max_; ++i) tried_[i] *= decay, kept_[i] *= decay;
    observe_acceptance(n_drafted, n_accepted, n_chosen);
    return news;
}

bool DraftLengthPolicy::accepted_probe_would_pay() const {
    DraftLengthPolicy after = *this;
    after.probing_ = true;
    after.count_round(shortest(), shortest(), shortest());
    return after.best(n_max_) > 0;
}

bool DraftLengthPolicy::predictable_text_pays() const {
    const double plain_rate = expected_tokens(0) / expected_cost(0);
    double e = 1.0, run = 1.0;
    for (int k = 1; k <= n_max_; ++k) {
        run *= kPredictable;
        e += run;
        if (k >= shortest() && e / expected_cost(k) > plain_rate) return true;
    }
    return false;
}

bool DraftLengthPolicy::wake() {
    if (!quiet_) return false;
    if (!predictable_text_pays() && ++texts_quiet_ < kWakeEvery) return false;
    texts_quiet_ = 0;
    quiet_ = false;
    probe_interval_ = kProbeFirst;
    rounds_since_draft_ = 0;
    return true;
}

void DraftLengthPolicy::observe_acceptance(int n_drafted, int n_accepted, int n_chosen) {
    const int tried = std::clamp(std::max(std::clamp(n_drafted, 0, n_max_), n_chosen), 0, n_max_);
    for (int j = 1; j <= tried && j - 1 <= n_accepted; ++j) {  // draft j was judged: drafts before it kept
        tried_[j - 1] += 1.0;
        if (n_accepted >= j) kept_[j - 1] += 1.0;
    }
}

void DraftLengthPolicy::observe_costs(int n_drafted, int verify_rows, int64_t pending_rows, double first_ms,
                                      double next_ms, double verify_ms, double between_ms) {
    // a plain round right after one that drafted runs on the caches the draft head left: not plain decoding's cost
    // (the 4-layer "predictable" preset at -t 1: 0.29 ms against 0.20 in a row of plain rounds)
    const bool warm_plain = n_drafted == 0 && !drafted_last_;
    if (verify_rows == 1 && warm_plain) plain_ms_.add(verify_ms);
    const double ref = reference();
    // step 0 writes the rows the last round accepted; after rounds without drafts it writes their deferred rows
    // too, a cost that belongs to those rounds (observe_rows), not to drafting: taken off at the measured cost of
    // a deferred row (a probe's step 0 is then the only measure of step 0 while drafting does not pay)
    double own_first = -1.0;  // step 0 without the deferred rows it wrote (ms); < 0: unknown
    if (n_drafted > 0 && pending_rows <= n_max_ + 1) {
        own_first = first_ms;
    } else if (n_drafted > 0 && row_x_.get() >= 0 && ref > 0) {
        own_first = first_ms - double(pending_rows - 1) * row_x_.get() * ref;
    }
    if (ref > 0) {  // a drafting round before any plain one was timed has no reference: no sample
        if (own_first > 0) first_x_.add(own_first / ref);
        if (n_drafted > 1) next_x_.add(next_ms / (n_drafted - 1) / ref);
        if (verify_rows >= 2 && verify_rows <= n_max_ + 1) verify_x_[verify_rows - 2].add(verify_ms / ref);
        // the caller's own time per round (detokenizing, streaming): the same for every k, but it weighs against
        // short rounds; an idle gap (a client reading slowly) is not the caller's cost, hence the cap
        if (between_ms >= 0) between_x_.add(std::min(between_ms / ref, 2.0));
    }
    // judged with step 0 as it ran when the deferred rows' share is unknown (no 64 deferred rows were written yet:
    // probes every kProbeFirst rounds never let that many wait), which prices drafting a little high
    if (n_drafted > 0 || warm_plain) {
        const double between = between_ms >= 0 ? std::min(between_ms, 2.0 * unit()) : 0.0;
        const double step0 = own_first > 0 ? own_first : first_ms;
        judge(n_drafted, verify_rows, step0 + next_ms + verify_ms + between, verify_ms + between);
    }
}

void DraftLengthPolicy::judge(int n_drafted, int verify_rows, double round_ms, double plain_ms) {
    if (n_drafted == 0 && verify_rows == 1) {
        plain_sum_ += plain_ms;
        ++plain_n_;
        return;
    }
    // a round of the probes' length after rounds without drafts, against their mean: ratios of window means, not a
    // mean of ratios (one slow plain round would make a ratio large)
    if (probe_length(n_drafted, verify_rows) && plain_n_ > 0 && round_ms > plain_ms) {
        probe_ms_.add(round_ms);
        before_ms_.add(plain_sum_ / double(plain_n_));
    }
    plain_sum_ = 0.0;
    plain_n_ = 0;
    if (probe_ms_.count() >= RecentCost::kWindow && pairs_miss_min_gain()) gave_up_ = true;
}

bool DraftLengthPolicy::pairs_miss_min_gain() const {
    return (shortest() + 1) * before_ms_.get() < kMinGain * probe_ms_.get();
}

bool DraftLengthPolicy::reconsider() {
    if (!reconsider_due()) return false;
    gave_up_ = false;
    dormant_rounds_ = 0;
    drafted_last_ = false;  // the plain rounds before this one ran without the draft head
    probe_ms_ = RecentCost();
    before_ms_ = RecentCost();
    plain_sum_ = 0.0;
    plain_n_ = 0;
    probe_interval_ = kProbeFirst;
    rounds_since_draft_ = 0;
    return true;
}

void DraftLengthPolicy::observe_rows(int64_t n_rows, double ms) {
    const double ref = reference();
    if (n_rows > 0 && ref > 0) row_x_.add(ms / double(n_rows) / ref);
}

}  // namespace glm5next
