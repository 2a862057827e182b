// Token generation on one sequence, with or without draft-MTP speculation (docs/runtime.md, draft-MTP round):
//   1. draft: step 0 on (h_p0, x_{p0+1}); steps 1..n-1 on (z, d), reusing step 0's selection with index sharing;
//      stop early when the draft's top probability is below p_min;
//   2. verify: one trunk pass over [x_{p0+1}, d_1..d_n] with per-row KDA snapshots;
//   3. accept: speculative sampling (exact match when greedy), then the correction or bonus token;
//   4. commit: the trunk keeps the accepted rows (Sequence::commit: KDA rolls back to its snapshot), the draft
//      head's provisional rows are rewritten from the trunk's real hidden states with the next round's step 0.
// step() runs these four in this order, each a function of its own, then count() and carry() (what the next
// round starts from); nothing calls back up. Each step that runs a graph is cut in two around it: the part the
// sequence contributes (its rows) and what follows once the part ran; a Generator runs its parts alone, and
// runtime/batch.h runs the parts of several generators (one per sequence) in shared graphs, so that a generator's
// tokens and drafts are the same whether it runs alone or batched. A constrained round (structured output) is the same round cut in
// pieces, data flowing one way: begin_draft(), then draft_next(mask) step by step with the mask of the caller's
// grammar after the drafts so far, then verify() with each target row's mask (or draft() and a verify() of the
// drafts the grammar allows, which accepts fewer: an unmasked draft head often proposes what the grammar refuses).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/draft_chain.h"
#include "runtime/draft_length.h"
#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "runtime/sequence.h"
#include "runtime/token_probs.h"

namespace glm5next {

// How a round keeps drafts when the sampler draws (temperature > 0; greedy keeps a draft iff it is the target's
// argmax either way). docs/runtime.md, draft-MTP round, step 3.
//   match: each draft is its head's argmax; the target draws its token at every verify row as plain decoding
//     draws it, with the same random numbers, and a draft is kept while it equals the drawn token. llama.cpp's
//     rule (common/speculative.cpp: the draft is the top candidate, common_sampler_sample_and_accept_n): a seeded
//     generation emits the tokens it emits without drafting (llama-server's test_with_and_without_draft).
//   rejection: speculative sampling (Leviathan et al. 2023; the project spec's rule): d ~ q, kept
//     with probability min(1, p(d)/q(d)), else a token of the residual max(p - q, 0). The same distribution, more
//     drafts kept at high temperature, but other tokens than plain decoding for a seed.
enum class SampledAccept { match, rejection };

struct SpecParams {
    int n_max = 3;           // drafts per round (the most, when adaptive); 0 = no speculation
    int n_min = 0;           // a draft shorter than this is not verified
    float p_min = 0.0f;      // stop drafting when the draft's top probability is below this
    int index_share = -1;    // -1: the file's index_share_for_mtp_iteration; 0 off; 1 on
    // Benchmarks only: accept a fixed mean number of drafts per round (mean accepted length - 1), whatever the
    // target says. The text is then meaningless; the speed is that of a model with this acceptance.
    float synthetic_accepted = -1.0f;
    // true: each round drafts the number DraftLengthPolicy chooses from this generation's measured acceptance and
    // timings (0 when drafting does not pay), at most n_max; false: n_max every round. Greedy output, and sampled
    // output under SampledAccept::match, is the same either way; under rejection a fixed seed's output depends on
    // the draft lengths, so adaptive makes it depend on timing: false reproduces it.
    bool adaptive = true;
    // rejection: the spec's rule, which keeps drafts when sampling (0.84 of them at temperature 0.8 on the
    // predictable preset against 0.04 under match; docs/runtime.md, draft-MTP round).
    SampledAccept sampled_accept = SampledAccept::rejection;
};

struct SpecStats {
    int64_t n_prompt = 0;
    int64_t n_cached = 0;                      // prompt tokens resumed from the cache (not evaluated)
    bool from_checkpoint = false;              // they came from a context checkpoint (else: the sequence as it was)
    int64_t n_rounds = 0;                      // verify passes that carried drafts
    int64_t n_drafted = 0, n_accepted = 0;
    std::vector<int64_t> drafted_at, accepted_at;  // per draft position (0 = first draft of a round)
    std::vector<int64_t> rounds_at_length;         // [n_max + 1]: rounds by the drafts they were allowed (0: none)
    // The most draft-head rows waiting at once to be written (each holds the trunk's hidden state, n_embd floats, on
    // the host): a prompt's are written a ubatch at a time as it is evaluated, so this stays under two ubatches.
    int64_t pending_rows_max = 0;
    double prompt_ms = 0, draft_ms = 0, verify_ms = 0;
};

class Batch;

class Generator {
public:
    // Generation on `seq` (which must outlive the generator). Raises std::invalid_argument when speculation is
    // asked for and the file has no NextN layer, or n_max does not fit a ubatch.
    // n_probs >= 0: report every emitted token's log-probability and the n_probs most probable tokens' (probs());
    // < 0: none. post_sampling_probs: those of the distribution the sampler drew from (its filters and temperature
    // applied; sampled_token_probs), else the model's (token_probs).
    // logit_bias: added to the logits of every target row (and of every draft step, so that drafts follow it),
    // checked by check_logit_bias (std::invalid_argument).
    // end_ids: end-of-generation tokens: drafting stops after drafting one (nothing that follows it is emitted).
    // policy: the draft length policy an adaptive generator reports to and asks (spec.adaptive with n_max > 0), so
    // that what it learned of acceptance and timings outlives one request (Model keeps one per n_max, n_min); null:
    // a new one. Throws std::invalid_argument for a policy of another n_max or n_min.
    Generator(Sequence & seq, const SpecParams & spec, const SamplerParams & sampling, int n_probs = -1,
              bool post_sampling_probs = false, std::vector<LogitBias> logit_bias = {},
              std::shared_ptr<DraftLengthPolicy> policy = nullptr, std::vector<int32_t> end_ids = {});

    // Evaluates `prompt` and samples the first token, which it returns. With `cache_prompt` the sequence keeps the
    // longest prefix of the prompt it can resume from (Sequence::resume) and evaluates only the rest; without, it
    // starts over. Either way it then keeps a checkpoint at the end of the prompt (where the next turn of a chat
    // starts) and at the rows of runtime/checkpoint_plan.h (where a re-rendered next turn parts) and, when
    // speculating, writes the NextN layer's rows for the prompt at once (not with the first draft), so that a later
    // request, drafting or not, can resume from it. Throws std::invalid_argument for an
    // empty prompt, a token outside the vocabulary or a prompt longer than n_ctx.
    // mask: [mask_words(n_vocab)] token bitmask for the first token (sampling.h), or null.
    int32_t start(const std::vector<int32_t> & prompt, bool cache_prompt = false, const uint32_t * mask = nullptr);

    // One round: evaluates the last token (with up to n_max drafts when speculating: as many as the draft length
    // policy chooses when adaptive, fewer when the context or `max_tokens`, the tokens the caller may still use,
    // leaves less room) and returns the tokens it emits: the
    // accepted drafts, then the target's own token (at most max_tokens of them). Throws std::invalid_argument
    // without start() or when the context is full (room() == 0).
    std::vector<int32_t> step(int64_t max_tokens = INT64_MAX);

    // The first half of a round (step 1): drafts up to n_max tokens as step() would (none without speculation)
    // and returns them, unverified. verify() must follow before anything else runs on the sequence. Throws
    // std::invalid_argument as step(), or when the last drafts were not verified.
    const std::vector<int32_t> & draft(int64_t max_tokens = INT64_MAX);

    // The same first half step by step: begin_draft() chooses how many drafts this round may have (0 without
    // speculation, or when the policy finds that drafting does not pay), writes the pending draft rows and runs
    // step 0 when it is more than 0 (else the rows wait, written together later), and returns it; each draft_next()
    // then drafts one token from the current step with `mask` ([mask_words(n_vocab)] or null) applied to its
    // logits, or returns -1 once drafting stopped (the limit, or p_min, judged on the masked logits). A draft
    // sampled under the grammar's mask is one the grammar allows, so a constrained round keeps its drafts. verify()
    // must follow. Throws as draft(); draft_next without begin_draft() throws std::invalid_argument.
    int64_t begin_draft(int64_t max_tokens = INT64_MAX);
    int32_t draft_next(const uint32_t * mask = nullptr);

    // The second half (steps 2-4): verifies the first n_keep drafts of the round (0 <= n_keep <= their
    // number) and returns the emitted tokens as step() does. masks: [n_keep + 1, mask_words(n_vocab)] row-major,
    // row i the tokens allowed after drafts[:i], or null: a masked row's disallowed logits are -inf before
    // acceptance and sampling, so the tokens follow the target distribution restricted to the mask (greedy: the
    // argmax among the allowed). The drafts left out must start with one that mask row n_keep disallows (the
    // caller cuts the drafts at the first token its grammar refuses): that draft counts as rejected, and row
    // n_keep's token comes from the residual of speculative sampling, which keeps the output distribution exact.
    // The statistics count every draft of the round as drafted. Fewer than n_min drafts are not verified (none
    // is). Throws std::invalid_argument without drafts to verify or for n_keep out of range.
    std::vector<int32_t> verify(int64_t n_keep, const uint32_t * masks = nullptr);

    // Ends a generation: writes the NextN layer's rows still pending for evaluated tokens (they would go with the
    // next round's first draft), so that a later prompt extending this sequence resumes at its end with the draft
    // head's rows complete (Sequence::resume). Optional: without it a later prompt resumes at a checkpoint.
    void finish();

    // Tokens the context can still take (the last emitted one needs a row before anything follows it).
    int64_t room() const;

    int64_t n_vocab() const { return engine_.n_vocab(); }
    Sequence & sequence() const { return seq_; }
    // Whether the prompt given to start (or Batch::start) still has rows to evaluate, or its first token to sample;
    // and how many rows.
    bool prompting() const { return prompting_; }
    int64_t prompt_left() const { return prompting_ ? (int64_t) prompt_.size() - prompt_at_ : 0; }
    // The rows of that prompt the next round evaluates (a ubatch: Sequence::prompt_ubatch).
    int64_t prompt_next_rows() const { return prompt_left() > 0 ? seq_.prompt_ubatch(prompt_left()) : 0; }

    // With n_probs >= 0, the log-probabilities of the tokens the last start(), step() or verify() returned, one per
    // token in order, from the target rows that produced them (runtime/token_probs.h); empty otherwise.
    const std::vector<TokenProbs> & probs() const { return probs_; }

    const SpecStats & stats() const { return stats_; }
    // The draft length policy this generator reports to (null unless adaptive with n_max > 0).
    const std::shared_ptr<DraftLengthPolicy> & policy() const { return policy_; }
    // Speculating, unless the policy found that drafting cannot pay on this machine and file
    // (DraftLengthPolicy::can_pay, final) or that this text is not one the draft head predicts (quiet), or the
    // generation rests (resting_: begin_prompt, begin_round): the rounds then run as without speculation and write no
    // draft-head rows either (~2% of a decode step each on the bundled model q8_0 at -t 1; glm5next-bench's rows of
    // auto).
    bool drafting() const {
        return chain_ && !resting_ && (!policy_ || (policy_->can_pay() && !policy_->quiet()));
    }

private:
    friend class Batch;  // runs the phases below for several generators at once

    // --- The phases (each graph-running step as its part, then what follows once it ran) ---
    // The prompt: begin_prompt keeps what the sequence can resume (start's cache_prompt); prompt_part gives the
    // next ubatch of the rest, of at most max_rows rows (false when none is left), prompt_ran follows it;
    // finish_prompt then samples the first token under `mask` and returns it.
    void begin_prompt(const std::vector<int32_t> & prompt, bool cache_prompt);
    bool prompt_part(TrunkPart & part, int64_t max_rows = INT64_MAX);
    void prompt_ran(double ms);
    int32_t finish_prompt(const uint32_t * mask);
    // A round: begin_round chooses its drafts (begin_draft's limit); draft_part gives the next draft-head part
    // before the first sample (pending rows to write, then step 0; false when none), draft_ran follows it;
    // sample_draft draws the current step's draft (draft_next's meaning) and, when drafting goes on, next_step_part
    // gives the step after it; verify_part gives the verify pass of the first n_keep drafts, verify_ran follows it
    // and returns the emitted tokens.
    // batch_drafts >= 0: the drafts a batch's policy chose for this round (an adaptive generator's own policy neither
    // chooses nor is told then); batch_dormant: that policy found that drafting cannot pay in the batch, or is quiet:
    // the generation drafts no more and writes no draft-head rows (it rests, drafting()).
    int64_t begin_round(int64_t max_tokens, int batch_drafts = -1, bool batch_dormant = false);
    bool draft_part(DraftPart & part);
    void draft_ran(const DraftPart & part, double ms);
    int32_t sample_draft(const uint32_t * mask);
    bool next_step_part(DraftPart & part);
    void step_ran(double ms);
    TrunkPart verify_part(int64_t n_keep);
    std::vector<int32_t> verify_ran(const uint32_t * masks, double ms, bool timed, bool batched);
    // Leaves the round a phase of it threw in (Batch): the round's state cleared, a pending verify pass committed to
    // its first row (the token the last round emitted, evaluated), so that the sequence is whole for what comes
    // next.
    void abandon_round();
    // An adaptive generator whose own policy finds that drafting can pay (a batch's policy may still choose for it).
    bool adapts() const { return chain_ && policy_ && policy_->can_pay(); }
    // Whether this round's drafting is at a step whose draft is not drawn yet.
    bool drafting_step() const { return drafted_ && chain_began_ && awaiting_sample_; }

    struct Draft {
        std::vector<int32_t> tokens;
        std::vector<std::vector<float>> q;  // q[i]: the draft distribution of tokens[i] (storage reused by rounds)
    };
    // 3. The tokens the round emits from the verify rows' logits ([n_keep + 1, n_vocab], constrained): the
    // accepted drafts among the first n_keep, then the correction or bonus token.
    std::vector<int32_t> accept(const float * logits, int64_t n_keep);
    // The logits the sampler sees for `n_rows` rows of `raw` ([n_rows, n_vocab]): `raw` itself when nothing
    // constrains them, else a constrained copy (constrained_; raw stays for the log-probabilities).
    const float * constrained(const float * raw, int64_t n_rows, const uint32_t * masks);
    // The reported probabilities of `token`, sampled from `row` (its raw logits `raw`): n_probs_, post_sampling_probs_.
    TokenProbs probs_of(const float * raw, const float * row, int32_t token);
    int64_t synthetic_keep(int64_t n_drafts);
    // Whether a draft is the draft head's argmax, kept while it equals the target's own draw (greedy, or
    // SampledAccept::match), rather than drawn from q and kept by speculative sampling.
    bool keeps_by_match() const { return sampler_.greedy() || spec_.sampled_accept == SampledAccept::match; }
    // Writes the pending draft-head rows now instead of with the next round's step 0.
    void write_pending_rows();
    // Runs the draft parts due (draft_part / draft_ran) alone, one graph each.
    void run_draft_parts();
    // Counts the draft-head rows waiting now into stats_.pending_rows_max.
    void note_pending_rows() {
        stats_.pending_rows_max = std::max<int64_t>(stats_.pending_rows_max, (int64_t) pending_x_.size());
    }
    // Drops the pending draft-head rows and what was planned for them (which to flush, which wait for a drafting
    // round, a flush's timing so far): a new prompt's rows replace them, or the policy gave drafting up.
    void drop_pending_rows();
    // The round's counters (stats_), once `emitted` is committed.
    void count(const std::vector<int32_t> & emitted);
    // The round's outcome and timings, for the draft length policy (n_keep drafts verified, verify_ms; `timed`: its
    // times are its costs, the batch's when it ran with other sequences (`batched`): what drafting costs there).
    void observe_round(int64_t n_keep, const std::vector<int32_t> & emitted, double verify_ms, bool timed,
                       bool batched);
    // The last round's outcome told to `policy`: with `costs` as DraftLengthPolicy::observe (the round's timings too),
    // else its acceptance only (observe_acceptance).
    void tell(DraftLengthPolicy & policy, bool costs) const;
    // What the next round starts from: the draft-head rows it writes (the kept rows' trunk states, from trunk row
    // P), the last hidden state and the token to evaluate next.
    void carry(const std::vector<int32_t> & emitted, int64_t P);

    Sequence & seq_;
    Engine & engine_;
    SpecParams spec_;
    bool started_ = false;
    int32_t next_ = -1;           // the last emitted token, not yet evaluated by the trunk
    std::vector<float> h_last_;   // trunk post-norm hidden of the last evaluated row
    Sampler sampler_;
    std::unique_ptr<DraftChain> chain_;  // null without speculation
    std::vector<int32_t> end_ids_;       // drafting stops after one of these
    SpecStats stats_;
    int n_probs_;
    bool post_sampling_probs_;
    std::vector<TokenProbs> probs_;
    std::vector<float> probs_p_;  // a row's sampled distribution, for post_sampling_probs (reused)
    std::vector<LogitBias> logit_bias_;
    std::vector<float> constrained_;   // constrained target rows (reused)
    std::vector<float> draft_logits_;  // a draft step's logits with the bias (reused)
    bool drafted_ = false;             // begin_draft() ran and verify() has not
    int64_t round_pos_ = 0;            // n_past when the round's begin_draft() ran
    int64_t round_builds_ = 0;         // the engine's graphs built by then
    int64_t draft_limit_ = 0;          // the most drafts of this round
    bool draft_stopped_ = false;       // p_min stopped this round's drafting
    bool batch_chose_ = false;         // this round's drafts were a batch policy's choice (begin_round)
    // No drafts and no draft-head rows for the rest of this generation: a batch's policy found that drafting does not
    // pay or went quiet (begin_round), or its prompt would have lost more than a ubatch of the cache to drafting
    // (begin_prompt).
    bool resting_ = false;
    // The last round's outcome as DraftLengthPolicy::observe takes it (verify_ms < 0: not a sample of its costs).
    struct RoundOutcome {
        int n_drafted = 0, n_accepted = 0, verify_rows = 0;
        int64_t pending_rows = 0;
        double first_ms = 0, next_ms = 0, verify_ms = -1, between_ms = -1;
        int n_chosen = -1;
    } outcome_;
    const DraftOutput * chain_out_ = nullptr;  // the draft chain's current step
    int32_t next_draft_ = -1;                  // the draft the next step runs on (next_step_part)
    // Draft-head rows not yet written: (trunk post-norm hidden [n_embd], next token) from position pending_pos_.
    std::vector<float> pending_h_;
    std::vector<int32_t> pending_x_;
    int64_t pending_pos_ = 0;
    int64_t pending_from_ = 0;  // pending_pos_ when the prompt began: the prompt's draft-head rows start here
    int64_t flush_rows_ = 0;   // of them, the first ones to write without drafting (a prompt's rows, deferred rows)
    int64_t prompt_rows_ = 0;  // of them, the first ones: a prompt's, waiting for a round that drafts (finish_prompt)
    bool deferred_flush_ = false;  // the flush writes rows deferred (by rounds without drafts, or a prompt's that
                                   // waited for a drafting round): timed for the policy (observe_rows)
    int64_t flushed_rows_ = 0;     // the flush's rows written so far, and their time
    double flush_ms_ = 0;
    int64_t part_rows_ = 0;    // the rows of the draft part running
    // The prompt being evaluated (start, Batch::start): its ids, the next row to evaluate, the current ubatch's
    // outputs, and its first row's hidden state's predecessor (row c-1 when c rows were resumed).
    bool prompting_ = false;
    std::vector<int32_t> prompt_;
    int64_t prompt_at_ = 0;
    EvalOutput prompt_out_;
    bool awaiting_sample_ = false;  // the current draft step's output is not drawn from yet
    // Adaptive draft lengths (spec_.adaptive with a draft head): told every round's outcome and timings
    // (observe_round), asked each round's length (begin_draft); may be shared with earlier generators.
    std::shared_ptr<DraftLengthPolicy> policy_;
    bool chain_began_ = false;   // this round ran step 0 (the pending draft-head rows were written)
    int64_t began_rows_ = 0;     // the draft-head rows step 0 wrote
    double first_ms_ = 0, next_ms_ = 0, between_ms_ = -1;  // this round's step 0, later steps, time before it
    std::chrono::steady_clock::time_point round_end_{};    // when the last round's verify() returned
    Draft draft_;           // this round's drafts (reused)
    std::vector<float> p_;  // the target distribution of a row (reused)
    // Engine outputs, reused round after round: no per-round allocation of [rows, n_vocab] logits.
    EvalOutput verify_out_;
    std::vector<int32_t> verify_tokens_;  // the verify pass's rows
    std::mt19937_64 synthetic_rng_{12345};
};

}  // namespace glm5next
