// How many drafts a draft-MTP round should carry (runtime.md, draft-MTP round; issue 15, speculation that never
// loses): the k in [0, limit] that maximizes the expected tokens a round emits per millisecond,
//   E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j      (a_j: acceptance of draft j given drafts 1..j-1 were accepted)
//   C(k) = draft(k) + verify(k + 1 rows) + between   (k = 0: verify(1) + the deferred draft-head row, a plain step)
//   draft(k) = first + (k - 1) * next             (step 0 writes the pending draft-head rows and drafts token 1)
// from estimates this object keeps of the round outcomes and timings the caller reports (data flows one way: the
// Generator reports a round, then asks for the next round's k).
// Acceptance: counts decayed every round that drafted (half-life kHalfLife such rounds, so that it follows the
// content; halved by an accepted probe) with a Beta prior, position j's anchored on position j-1's estimate.
// Costs: medians of the latest times measured on this machine and file (verify per row count; row counts never
// measured from an affine fit of those that were, or from prior ratios before two were). Medians, not means: on a
// shared machine one round in a few takes 10x its usual time (preempted threads), and a mean would then turn
// drafting off for as long as the outlier weighs.
// Probes: when no drafting pays, every probe_interval() rounds one draft is tried anyway (the interval doubling
// while probes are rejected), so that the acceptance estimates can recover when the text becomes predictable again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace glm5next {

class DraftLengthPolicy {
public:
    // n_max: the most drafts a round may carry (>= 0); n_min: a positive choice is at least this (shorter drafts
    // are not verified, so choosing them would waste their steps). Throws std::invalid_argument for n_max < 0.
    DraftLengthPolicy(int n_max, int n_min = 0);

    // The next round's number of drafts in {0} U [max(1, n_min), limit] (limit clamped to [0, n_max]): the best
    // expected rate, or a one-draft probe when the best is 0 and probe_interval() rounds went by without drafts.
    int choose(int limit);

    // A round's outcome. n_drafted drafts (<= n_max; 0 for a round without drafts), of which the first n_accepted
    // were accepted (a draft the caller cut off, e.g. refused by a grammar, counts as rejected); verify_rows: the
    // rows of its verify pass (kept drafts + 1). first_ms: step 0 (with the pending_rows draft-head rows it wrote),
    // next_ms: the later steps together, verify_ms: the verify pass (with acceptance and commit), between_ms: the
    // caller's time since the previous round ended (< 0: unknown). Times in ms.
    void observe(int n_drafted, int n_accepted, int verify_rows, int64_t pending_rows, double first_ms,
                 double next_ms, double verify_ms, double between_ms = -1.0);
    // Draft-head rows written without drafting (rows deferred by rounds that chose 0), n_rows of them in ms.
    void observe_rows(int64_t n_rows, double ms);

    // Estimates (for stats and tests): acceptance of draft j (1-based) given the earlier ones were accepted, the
    // expected tokens per round E(k) and the expected cost C(k) in ms (in units of a one-row verify before any
    // timing was reported).
    double acceptance(int j) const;
    // False once the measured costs say that no acceptance could make drafting pay: even if every draft were
    // accepted, each k in [max(1, n_min), n_max] would emit fewer tokens per ms than rounds without drafts and
    // without draft-head rows (plain decoding). Judged only when step 0 and verify passes of one and two rows have
    // kTrusted timings each; true before. (Bundled model q8_0 at -t 1: a second verify row costs ~0.9 of the first,
    // so even k = 3 fully accepted emits ~0.9x plain decoding's tokens per ms.)
    bool can_pay() const;
    double expected_tokens(int k) const;
    double expected_cost(int k) const;
    int probe_interval() const { return probe_interval_; }
    int n_max() const { return n_max_; }
    int n_min() const { return n_min_; }

    static constexpr double kHalfLife = 32.0;  // rounds; ~46 rounds of memory: follows a change of content
    // Rounds between probes while no drafting pays: the most loses ~C(1) - C(0) per kProbeMost rounds (under 0.5%
    // on the bundled model, where a draft step is ~0.2 and a second verify row ~0.35 of a decode step).
    static constexpr int kProbeFirst = 8, kProbeMost = 128;

private:
    // The median of the latest kWindow samples (a timing in ms); < 0 before the first.
    class RecentMedian {
    public:
        void add(double sample);
        double get() const { return median_; }
        size_t count() const { return count_; }  // samples added, all told
    private:
        static constexpr size_t kWindow = 9;
        std::vector<double> samples_;  // ring buffer
        size_t next_ = 0;
        double median_ = -1.0;
        size_t count_ = 0;
    };

    double verify_cost(int rows) const;
    // acceptance of draft i + 1 given the earlier ones were accepted, from position i's counts and `before`, the
    // estimate of the position before it (the prior for the first)
    double next_acceptance(int i, double before) const;
    double unit() const;  // a one-row verify in ms (1 before any verify was timed)

    int n_max_, n_min_;
    std::vector<double> tried_, kept_;  // per draft position j - 1: decayed trials and acceptances
    std::vector<RecentMedian> verify_ms_;  // per row count r - 1: verify ms
    RecentMedian first_ms_, next_ms_, row_ms_, between_ms_;  // step 0, a later step, a deferred row, the caller
    int rounds_since_draft_ = 0;
    int probe_interval_ = kProbeFirst;
    bool probing_ = false;  // the last choice was a probe
};

}  // namespace glm5next
