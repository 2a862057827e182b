// How many drafts a draft-MTP round should carry (docs/runtime.md, draft-MTP round; issue 15, speculation that never
// loses): the k in [0, limit] that maximizes the expected tokens a round emits per millisecond,
//   E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j      (a_j: acceptance of draft j given drafts 1..j-1 were accepted)
//   C(k) = draft(k) + verify(k + 1 rows) + between   (k = 0: verify(1) + the deferred draft-head row, a plain step)
//   draft(k) = first + (k - 1) * next             (step 0 writes the pending draft-head rows and drafts token 1)
// from estimates this object keeps of the round outcomes and timings the caller reports (data flows one way: the
// Generator reports a round, then asks for the next round's k).
// Acceptance: counts decayed every round that drafted (half-life kHalfLife such rounds, so that it follows the
// content; halved by an accepted probe) with a Beta prior, position j's anchored on position j-1's estimate.
// Costs: each kind of round's cost (step 0, a later step, a verify pass of r > 1 rows, a deferred draft-head row,
// the caller's time) as a ratio to plain decoding at the moment it was timed: each sample divided by the median of
// the kReference rounds without drafts timed last (a few rounds before it where drafting does not pay, at most ~100
// where it does). A round is priced at that ratio times plain decoding's cost now. Not in ms: the machine's speed
// drifts (2-3x over seconds on a shared one) and a kind of round is timed only while it runs, so costs in ms priced
// the kinds not run lately at the speed of their time. Measured (bundled model q8_0, -t 2, one sequence on this
// repository's code, acceptance ~0.3): while only probes drafted, plain decoding was timed every round and one
// draft's cost came from probes long before; when the machine slowed, plain rounds were priced at 1.88 ms against
// 2.32 for a one-draft round timed while it was faster, and the policy drafted one token in 42 rounds at acceptance
// 0.35 (475 tok/s against 520-845 in that process's other runs).
// Each kind's ratio is the robust mean of its latest samples, as plain decoding's ms are (verify per row count; row
// counts never measured from an affine fit of those that were, or from the prior's ratios (RoundCostPrior) before two
// were): the mean of the last kWindow samples, each clipped at twice their median. Not plain means: on a shared
// machine one round in a few takes 10x its usual time (preempted threads), and a mean would then turn drafting off for
// as long as the outlier weighs.
// Not medians: a round with drafts runs more graphs than one without and has the heavier tail, so medians favour
// drafting (bundled model q8_0, -t 2, held-out code: a round with one draft had median 3.56 ms and mean 3.82 ms,
// one without 2.46 and 2.40; at the mean one draft gains 4%, at the median 14%). A new policy opens with rounds
// without drafts until plain decoding was timed (choose), so that no drafting is weighed against an extrapolation
// (and a drafting round timed before any plain one has no reference: only its acceptance counts).
// Probes: when no drafting pays, every probe_interval() rounds one draft is tried anyway, so that the acceptance
// estimates can recover when the text becomes predictable again. The interval doubles (to kProbeMost) after a
// rejected probe, comes back to kProbeFirst after one that makes drafting pay or was accepted against the odds (the
// estimate of draft 1 below 1/4: news that the text changed), and stays after one accepted as expected that leaves
// drafting unprofitable (every accepted probe used to bring it back: on held-out code, two probes in three accepted
// and drafting never paying at -t 1 on the bundled model, that cost ~5% of decode time). Until can_pay is judged,
// probes come every kProbeFirst rounds, each a paired measure of what drafting costs against plain decoding, unless
// they are rejected while the pairs so far say drafting could pay if accepted: those space out as they do after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace glm5next {

// What a round costs before this policy timed it, in units of a round without drafts (a one-row verify), so that
// it holds however fast the machine runs at the moment (2-3x swings over seconds on a shared one): the policy
// scales it by the rounds without drafts it timed. Measured at load on a scratch sequence (issue 28;
// glm5next_runtime/draft_calibration.py), or the built-in ratios (bundled model q8_0 at -t 1, older builds: step 0
// ~0.3, a later step ~0.25, a deferred draft-head row ~0.05; each verify row +0.25, an assumed slope).
struct RoundCostPrior {
    double first = 0.3;         // draft step 0
    double next = 0.25;         // each later draft step
    double row = 0.05;          // a deferred draft-head row
    std::vector<double> verify; // verify[r - 1]: a verify pass of r rows (verify[0] == 1); empty: 1 + 0.25 (r - 1)

    // A verify pass of `rows` rows: verify[rows - 1]; past its end, its last entry plus the slope of its last two
    // (at least 0; 0.25 with one entry); empty, 1 + 0.25 (rows - 1). Throws std::invalid_argument for rows < 1.
    double verify_ratio(int rows) const;
    // Throws std::invalid_argument, naming the field, for a ratio that is not finite and positive, or verify[0] != 1.
    void check() const;
};

// The estimate a DraftLengthPolicy makes of a cost from its latest timings: the mean of samples[0, n) (ms), each
// clipped at twice their median (why: DraftLengthPolicy's header). 1 <= n <= kCostWindow, else std::invalid_argument.
// The calibration at load estimates its rounds with it too, so that a prior is what the policy's timings would give.
constexpr size_t kCostWindow = 9;
double clipped_mean(const double * samples, size_t n);

class DraftLengthPolicy {
public:
    // n_max: the most drafts a round may carry (>= 0); n_min: a positive choice is at least this (shorter drafts
    // are not verified, so choosing them would waste their steps); prior: the costs assumed until timed. Throws
    // std::invalid_argument for n_max < 0 or a bad prior (RoundCostPrior::check).
    DraftLengthPolicy(int n_max, int n_min = 0, RoundCostPrior prior = {});

    // The next round's number of drafts in {0} U [max(1, n_min), limit] (limit clamped to [0, n_max]): the best
    // expected rate, or a one-draft probe when the best is 0 and probe_interval() rounds went by without drafts.
    int choose(int limit);

    // A round's outcome. n_drafted drafts (<= n_max; 0 for a round without drafts), of which the first n_accepted
    // were accepted (a draft the caller cut off, e.g. refused by a grammar, counts as rejected); verify_rows: the
    // rows of its verify pass (kept drafts + 1). first_ms: step 0 (with the pending_rows draft-head rows it wrote),
    // next_ms: the later steps together, verify_ms: the verify pass (with acceptance and commit), between_ms: the
    // caller's time since the previous round ended (< 0: unknown). Times in ms; verify_ms < 0: the round's costs are
    // unknown (it built a graph: a one-time cost, 3-5x a warm round's), only its acceptance counts. n_chosen: the
    // drafts choose allowed (< 0: n_drafted); a draft the draft step did not produce (p_min stopped it) after
    // accepted ones counts as rejected, or a round that drafts nothing would teach nothing and be chosen forever.
    void observe(int n_drafted, int n_accepted, int verify_rows, int64_t pending_rows, double first_ms,
                 double next_ms, double verify_ms, double between_ms = -1.0, int n_chosen = -1);
    // Another sequence's outcome in the round the last observe told (a batch's rounds: observe with the round's costs
    // and one sequence's outcome, then this for each other sequence in it): its drafts judged (up to the first
    // rejected) and accepted count, nothing else.
    void observe_acceptance(int n_drafted, int n_accepted, int n_chosen = -1);
    // Draft-head rows written without drafting (rows deferred by rounds that chose 0), n_rows of them in ms.
    void observe_rows(int64_t n_rows, double ms);

    // Estimates (for stats and tests): acceptance of draft j (1-based) given the earlier ones were accepted, the
    // expected tokens per round E(k) and the expected cost C(k) in ms: its kinds' ratios times plain decoding's cost
    // now (in units of a one-row verify before any timing was reported).
    double acceptance(int j) const;
    // False once the measured costs said that no acceptance could make drafting pay on this machine and file: a
    // probe's round (max(1, n_min) drafts), even fully accepted, would emit fewer than kMinGain times the tokens per
    // ms of the rounds without drafts just before it (plain decoding). Judged on the last kWindow probe-length
    // rounds and, paired with each, the rounds without drafts before it, so that the machine's speed (which varies
    // 2-3x over seconds on a shared machine, and made costs timed far apart give up drafting at -t 2 where it
    // pays) cancels out; true before. Once false it stays false (the rounds that follow run no drafts, so nothing
    // measured later could speak for drafting) until reconsider() judges anew. Bundled model q8_0 at -t 1: a draft
    // step and a second verify row cost ~1.05 decode steps.
    bool can_pay() const { return !gave_up_; }
    // A round without drafts because drafting cannot pay (the Generator's dormant rounds), counted for reconsider.
    void observe_dormant() { ++dormant_rounds_; }
    // At a request's start (Generator::start): after kReconsiderAfter dormant rounds, can_pay is judged anew from
    // fresh paired probes (the probes' spacing starts again at kProbeFirst), so that a server slot that judged while the
    // machine was busy does not decode without drafts for the rest of its life. Returns whether it did. (At a
    // request's start, not mid-request: the dormant rounds wrote no draft-head rows, and a request's prompt resumes
    // only where the draft head's rows end, Sequence::resume; the caller asks reconsider_due first and weighs that.)
    // Costs ~2 requests' probes per kReconsiderAfter rounds.
    bool reconsider();
    bool reconsider_due() const { return gave_up_ && dormant_rounds_ >= kReconsiderAfter; }
    // True once a probe was rejected where even an accepted next probe would not make drafting pay (the acceptance
    // estimates after it, news included, would still choose no drafts): the text is not one the draft head predicts,
    // and staying ready to draft costs the draft-head rows of every token (the NextN layer once more per row, kept
    // for the next probe) for nothing the probes can find. The caller's generation then runs without drafts and
    // writes no draft-head rows, as when drafting cannot pay; choose drafts nothing. Until wake. Measured (bench
    // preset q8_0, random weights, acceptance ~0.02, glm5next-server -np 4 -t 2, four clients, 6-7 runs of 128
    // tokens each): before, the batch's policy probed 0-9 times in a request's 128 rounds, up to 128 rounds apart,
    // and wrote the draft-head rows of every token: drafting at 0.92-1.09x plain decoding (median 0.99); quiet, one
    // probe per request, the rows of its prompt and first 8 rounds: 0.92-1.15x (median 1.02), noise about as large.
    bool quiet() const { return quiet_; }
    // At a generation's start (a new text, which the draft head may predict): no longer quiet, if a predictable text
    // could make drafting pay at the costs measured (predictable_text_pays); the next probe comes within kProbeFirst
    // rounds. The acceptance estimates stay, so that on text like the last one a first rejected probe quiets it
    // again. Where no text the draft head predicts could pay, a probe would buy the prompt's draft-head rows (the
    // NextN layer over the prompt once more, ~1/13 of its prefill on the bundled model) for nothing: the policy stays
    // quiet, but for one new text in kWakeEvery, which times the costs again (a judgment made while the machine was
    // slow, or a batch that grew cheaper, is not kept for good). Returns whether it woke.
    bool wake();
    // Whether drafting would pay (best) on a text whose every draft is accepted with probability kPredictable, at the
    // round costs estimated now. Measured (bundled model q8_0, -t 2, a batch of four sequences: one draft and a second
    // verify row of each cost ~0.9 of a round, break-even at acceptance ~0.9; one sequence: ~0.35): false at four
    // sequences, true alone.
    bool predictable_text_pays() const;
    double expected_tokens(int k) const;
    double expected_cost(int k) const;
    int probe_interval() const { return probe_interval_; }
    int n_max() const { return n_max_; }
    int n_min() const { return n_min_; }
    const RoundCostPrior & prior() const { return prior_; }

    static constexpr double kHalfLife = 32.0;  // rounds; ~46 rounds of memory: follows a change of content
    // Rounds between probes while no drafting pays: the most loses C(1) - C(0), less what the probe's draft gains,
    // per kProbeMost rounds (bundled model q8_0, -t 1, held-out code: a draft step and a second verify row cost ~1.05
    // decode steps and gain ~0.66 tokens, so ~0.3% of the rounds' time; at kProbeFirst ~5%).
    static constexpr int kProbeFirst = 8, kProbeMost = 128;
    static constexpr int64_t kReconsiderAfter = 4096;  // dormant rounds before reconsider judges can_pay anew
    // The acceptance of each draft on a text the draft head predicts well: the bundled model's first draft on
    // held-out code, 0.75 (its later drafts 0.55 and 0.37 given the earlier accepted); DeepSeek-V3 reports 0.85-0.9
    // for its MTP head's one draft. A text that takes more to pay is not probed (wake).
    static constexpr double kPredictable = 0.8;
    // New texts per wake of a quiet policy where no predictable text pays: each costs the batch's prompt draft-head
    // rows and a probe (bundled model q8_0, 4 sequences, -t 2: ~35 ms, one ~0.75 s run's 5%; at 16 that was a
    // run in four, ~1% of draft-MTP's time against plain decoding's)
    static constexpr int kWakeEvery = 64;

private:
    // clipped_mean of the latest kWindow samples (a timing in ms, or a ratio); < 0 before the first.
    class RecentCost {
    public:
        static constexpr size_t kWindow = kCostWindow;
        void add(double sample);
        double get() const { return cost_; }
        size_t count() const { return count_; }  // samples added, all told
        double median_of_latest(size_t n) const;  // of the latest min(n, held) samples; < 0 before the first
    private:
        std::vector<double> samples_;  // ring buffer
        size_t next_ = 0;
        double cost_ = -1.0;
        size_t count_ = 0;
    };

    // A verify pass of `rows` rows in plain rounds (1 for one row): its own ratio once trusted, else the line or the
    // prior (the class comment).
    double verify_ratio(int rows) const;
    size_t verify_count(int rows) const;  // verify passes of `rows` rows timed (plain rounds for 1)
    // The median of the last kReference rounds without drafts timed (ms): what a sample is divided by to become a
    // ratio; < 0 before the first.
    double reference() const;
    // The k in {0} U [shortest(), limit] with the best expected tokens per ms.
    int best(int limit) const;
    int shortest() const { return n_min_ > 1 ? n_min_ : 1; }  // the fewest drafts a positive choice carries (a probe's)
    // A round of a probe's length with all its drafts verified: what can_pay pairs with the plain rounds before it.
    bool probe_length(int n_drafted, int verify_rows) const;
    // Whether a periodic refresh (choose's plain runs, one draft more) is due, counting this round in rounds_since
    // (reset when due): every kProbeFirst rounds while what it measures is untimed, every kPlainEvery after.
    static bool refresh_due(int & rounds_since, bool untimed);
    // observe's timings (verify_ms >= 0)
    void observe_costs(int n_drafted, int verify_rows, int64_t pending_rows, double first_ms, double next_ms,
                       double verify_ms, double between_ms);
    // can_pay's judgment, told each round's drafts and verify rows, its cost and the cost of a round without drafts
    // (its verify pass and the caller's time), in ms.
    void judge(int n_drafted, int verify_rows, double round_ms, double plain_ms);
    // Whether the probes' pairs so far (probe_ms_, before_ms_; some) say a fully accepted probe would emit fewer than
    // kMinGain times the tokens per ms of plain decoding: judge's verdict once there are kWindow of them.
    bool pairs_miss_min_gain() const;
    // acceptance of draft i + 1 given the earlier ones were accepted, from position i's counts and `before`, the
    // estimate of the position before it (the prior for the first)
    double next_acceptance(int i, double before) const;
    double unit() const;  // plain decoding's round (a one-row verify) in ms now (1 before any was timed)
    // The acceptance counts after a round (observe's arguments): decayed, or halved when the round was a probe
    // accepted against the odds (news, which it returns), then its judged drafts counted (observe_acceptance).
    bool count_round(int n_drafted, int n_accepted, int n_chosen);
    // Whether drafting would pay (best) after the next probe, were it accepted (count_round as observe would count
    // it). Judges quiet after a rejected probe.
    bool accepted_probe_would_pay() const;

    int n_max_, n_min_;
    RoundCostPrior prior_;
    std::vector<double> tried_, kept_;  // per draft position j - 1: decayed trials and acceptances
    RecentCost plain_ms_;  // a round without drafts (a one-row verify) after one without drafts, ms: the unit
    // in plain rounds at their time (ratios): per row count r - 2, a verify pass of r > 1 rows; step 0, a later step,
    // a deferred draft-head row, the caller's time between rounds
    std::vector<RecentCost> verify_x_;
    RecentCost first_x_, next_x_, row_x_, between_x_;
    int opening_left_;  // rounds left of the opening without drafts (choose)
    int rounds_since_draft_ = 0;
    int rounds_since_plain_ = 0;  // rounds since the last one without drafts (choose)
    int plain_left_ = 0;          // rounds of choose's run of plain rounds still to come
    int rounds_since_longer_ = 0; // drafting rounds since the last that drafted one more than the best (choose)
    bool drafted_last_ = false;   // the last round observed drafted
    int probe_interval_ = kProbeFirst;
    bool probing_ = false;  // the last choice was a probe
    // can_pay: the costs of probe-length rounds and the mean cost of the rounds without drafts before each (paired,
    // in step), and the rounds without drafts since the last round that drafted
    RecentCost probe_ms_, before_ms_;
    double plain_sum_ = 0.0;
    int64_t plain_n_ = 0;
    bool gave_up_ = false;
    int64_t dormant_rounds_ = 0;  // rounds without drafts since gave_up_ (observe_dormant)
    bool quiet_ = false;
    int texts_quiet_ = 0;  // new texts that found the policy quiet and did not wake it since it last woke (wake)
};

}  // namespace glm5next
