// One round for several generators, each on a sequence of its own on one engine (docs/runtime.md, Multi-sequence: one
// engine serves all slots; issue 24): the prompt ubatches of those still evaluating their prompt, the draft steps of
// those that draft and the verify passes of all of them run in shared graphs (Engine::run_trunk / run_draft), then
// each accepts and commits on its own. A round goes one way, in three phases the caller calls in order:
//   begin()        each decoding generator chooses its drafts; the draft head writes the rows waiting and runs
//                  step 0 (one graph for all; more when a generator has more than a ubatch of rows waiting);
//   draft_step()   while drafting(): each generator draws its draft from its current step under its mask (a
//                  grammar's), and the next steps of those that go on run in one graph;
//   verify()       one trunk graph: prompt ubatches and verify passes; each accepts under its masks and commits, a
//                  prompt that ended samples its first token; emitted(i) is what generator i emitted.
// A generator's tokens and drafts are those it gives alone (Generator::start / step): the graphs compute a row
// the same whatever it is batched with (graph/parts.h), and each generator's phases are its own.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "runtime/speculative.h"

namespace glm5next {

class Batch {
public:
    explicit Batch(Engine & engine) : engine_(engine) {}

    // Starts `prompt` on `gen` (cache_prompt as Generator::start): the rounds that include it evaluate it, a
    // ubatch per round, and the round of its last ubatch emits its first token. Throws as Generator::start for an
    // empty prompt, a token outside the vocabulary or a prompt longer than n_ctx.
    static void start(Generator & gen, const std::vector<int32_t> & prompt, bool cache_prompt);

    // The generators of the next round (each at most once, on sequences of this engine), with the tokens each one's
    // caller may still use (Generator::step's max_tokens). Clears the last round's. `policy`: the draft length
    // policy of the batch's rounds (or null): with two or more decoding generators whose lengths adapt, it chooses
    // one length for all of them from the batch's measured costs and their acceptance (their own policies, which
    // price rounds alone, are neither asked nor told: each sequence alone would find that its drafts add little
    // to a batch whose others draft anyway, and every one would keep drafting where none should).
    void set(const std::vector<Generator *> & gens, const std::vector<int64_t> & max_tokens,
             std::shared_ptr<DraftLengthPolicy> policy = nullptr);

    // The phases (above). Each throws as the Generator phase it runs (a full context, say), before any graph runs.
    void begin();
    bool drafting() const;
    // masks[i]: generator i's token bitmask for the draft it draws now ([mask_words(n_vocab)]) or null.
    void draft_step(const std::vector<const uint32_t *> & masks);
    // masks[i]: for a decoding generator [n_drafts(i) + 1, mask_words(n_vocab)] (Generator::verify's masks), for
    // one whose prompt may end this round its first token's mask; or null.
    void verify(const std::vector<const uint32_t *> & masks);

    size_t size() const { return gens_.size(); }
    int64_t n_vocab() const { return engine_.n_vocab(); }
    // The mask rows verify() reads for generator i: its drafts + 1 while decoding, 1 for a prompt.
    int64_t verify_rows(size_t i) const;
    // Generator i's drafts this round (after begin / draft_step), and the tokens it emitted (after verify: the
    // round's tokens; none for a prompt not finished).
    const std::vector<int32_t> & drafts(size_t i) const;
    const std::vector<int32_t> & emitted(size_t i) const { return emitted_.at(i); }
    // Why generator i's round failed (empty: it did not): what one generator's phase threw (a full context, a
    // sampler left with no token, a mask of another size) fails that generator's round alone; its sequence is left
    // whole (a pending verify pass committed to its first row) and the others go on. What an engine's graph throws
    // fails the round for all: the phase throws it.
    const std::string & error(size_t i) const { return errors_.at(i); }

private:
    // Engine::run_draft(parts), in ms.
    double timed_draft(const std::vector<DraftPart> & parts);
    void fail(size_t i, const std::exception & e);
    bool live(size_t i) const;

    Engine & engine_;
    std::vector<Generator *> gens_;
    std::vector<int64_t> max_tokens_;
    std::vector<std::vector<int32_t>> emitted_;
    std::vector<std::string> errors_;
    std::vector<bool> in_round_;  // began a round in begin() (decoding, not failed since)
    std::shared_ptr<DraftLengthPolicy> policy_;
    bool policy_chose_ = false;  // this round's lengths are policy_'s
};

}  // namespace glm5next
