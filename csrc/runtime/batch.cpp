#include "runtime/batch.h"

#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace glm5next {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void Batch::start(Generator & gen, const std::vector<int32_t> & prompt, bool cache_prompt) {
    gen.begin_prompt(prompt, cache_prompt);
}

void Batch::set(const std::vector<Generator *> & gens, const std::vector<int64_t> & max_tokens,
                std::shared_ptr<DraftLengthPolicy> policy) {
    if (gens.size() != max_tokens.size()) throw std::invalid_argument("a round needs one max_tokens per generator");
    for (size_t i = 0; i < gens.size(); ++i) {
        if (&gens[i]->sequence().engine() != &engine_) throw std::invalid_argument("a generator of another engine");
        for (size_t j = 0; j < i; ++j) {
            if (&gens[i]->sequence() == &gens[j]->sequence()) {
                throw std::invalid_argument("two generators of one sequence in a round");
            }
        }
    }
    gens_ = gens;
    max_tokens_ = max_tokens;
    emitted_.assign(gens.size(), {});
    errors_.assign(gens.size(), {});
    in_round_.assign(gens.size(), false);
    policy_ = std::move(policy);
}

void Batch::fail(size_t i, const std::exception & e) {
    errors_[i] = e.what();
    in_round_[i] = false;
    gens_[i]->abandon_round();
}

bool Batch::live(size_t i) const { return errors_[i].empty(); }

void Batch::begin() {
    int adapting = 0;  // decoding generators whose lengths adapt (a batch that put them to rest included)
    for (const Generator * g : gens_) adapting += !g->prompting() && g->adapts();
    policy_chose_ = policy_ && adapting >= 2;
    int drafts = -1;
    const bool dormant = policy_chose_ && (!policy_->can_pay() || policy_->quiet());
    if (dormant) {
        if (!policy_->can_pay()) policy_->observe_dormant();
        drafts = 0;
    } else if (policy_chose_) {
        drafts = policy_->choose(policy_->n_max());
    }
    for (size_t i = 0; i < gens_.size(); ++i) {
        if (gens_[i]->prompting()) continue;
        try {  // (a full context, say: that generator's fault, not the others')
            gens_[i]->begin_round(max_tokens_[i], drafts, dormant);
            in_round_[i] = true;
        } catch (const std::exception & e) {
            fail(i, e);
        }
    }
    // the rows each generator has waiting, a ubatch per graph, then step 0 (a generator's parts in order)
    while (true) {
        std::vector<DraftPart> parts;
        std::vector<Generator *> owners;
        for (size_t i = 0; i < gens_.size(); ++i) {
            DraftPart part;
            // (a prompting generator's: the draft-head rows of the ubatches it evaluated, Generator::prompt_ran)
            if ((in_round_[i] || gens_[i]->prompting()) && gens_[i]->draft_part(part)) {
                parts.push_back(part);
                owners.push_back(gens_[i]);
            }
        }
        if (parts.empty()) return;
        const double ms = timed_draft(parts);
        for (size_t i = 0; i < parts.size(); ++i) owners[i]->draft_ran(parts[i], ms);
    }
}

double Batch::timed_draft(const std::vector<DraftPart> & parts) {
    const auto t0 = std::chrono::steady_clock::now();
    engine_.run_draft(parts);
    return ms_since(t0);
}

bool Batch::drafting() const {
    for (const Generator * g : gens_) {
        if (g->drafting_step()) return true;
    }
    return false;
}

void Batch::draft_step(const std::vector<const uint32_t *> & masks) {
    if (masks.size() != gens_.size()) throw std::invalid_argument("draft_step needs one mask (or null) per generator");
    std::vector<DraftPart> parts;
    std::vector<Generator *> owners;
    for (size_t i = 0; i < gens_.size(); ++i) {
        Generator * g = gens_[i];
        if (!in_round_[i] || !g->drafting_step()) continue;
        try {  // (logits the bias and mask leave nothing of: that generator's fault)
            g->sample_draft(masks[i]);
        } catch (const std::exception & e) {
            fail(i, e);
            continue;
        }
        DraftPart part;
        if (g->next_step_part(part)) {
            parts.push_back(part);
            owners.push_back(g);
        }
    }
    if (parts.empty()) return;
    const double ms = timed_draft(parts);
    for (Generator * g : owners) g->step_ran(ms);
}

const std::vector<int32_t> & Batch::drafts(size_t i) const { return gens_.at(i)->draft_.tokens; }

int64_t Batch::verify_rows(size_t i) const {
    const Generator * g = gens_.at(i);
    return g->prompting() ? 1 : (int64_t) g->draft_.tokens.size() + 1;
}

void Batch::verify(const std::vector<const uint32_t *> & masks) {
    if (masks.size() != gens_.size()) throw std::invalid_argument("verify needs one mask (or null) per generator");
    std::vector<TrunkPart> parts;
    std::vector<size_t> owners;
    // On an engine whose steps are one pass (Engine::one_pass) the step's rows are bounded as llama.cpp's ubatch is:
    // n_batch rows, the verify rows first, then the prompts' rows in turn while rows are left (the rest wait for the
    // next step); elsewhere each prompt's part is a ubatch of its own (a group of its own, graph/parts.h).
    int64_t prompt_budget = INT64_MAX;
    if (engine_.one_pass()) {
        prompt_budget = engine_.params().n_batch;
        for (size_t i = 0; i < gens_.size(); ++i) {
            if (live(i) && !gens_[i]->prompting()) prompt_budget -= verify_rows(i);
        }
    }
    for (size_t i = 0; i < gens_.size(); ++i) {
        Generator * g = gens_[i];
        TrunkPart part;
        if (!live(i)) continue;
        if (g->prompting()) {
            // nothing left to evaluate (its first token comes below), or no rows left in this step
            if (prompt_budget <= 0 || !g->prompt_part(part, prompt_budget)) continue;
            prompt_budget -= part.n;
        } else {
            part = g->verify_part((int64_t) g->draft_.tokens.size());
        }
        parts.push_back(part);
        owners.push_back(i);
    }
    double ms = 0.0;
    if (!parts.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        engine_.run_trunk(parts);
        ms = ms_since(t0);
    }
    // the round's times are its costs for the draft length policies (the batch's costs: a verify row costs what it
    // adds to the batch's pass), unless a prompt ubatch shared the pass
    bool prompt_rows = false;
    for (size_t i : owners) prompt_rows = prompt_rows || gens_[i]->prompting();
    size_t next = 0;
    for (size_t i = 0; i < gens_.size(); ++i) {
        Generator * g = gens_[i];
        const bool ran = next < owners.size() && owners[next] == i;
        if (ran) ++next;
        if (!live(i)) continue;
        try {  // (a sampler left no token, a grammar's mask of another size: that generator's fault)
            if (g->prompting()) {
                if (ran) g->prompt_ran(ms);
                if (g->prompt_left() == 0) emitted_[i] = {g->finish_prompt(masks[i])};
                continue;
            }
            emitted_[i] = g->verify_ran(masks[i], ms, !prompt_rows, gens_.size() > 1);
        } catch (const std::exception & e) {
            fail(i, e);
        }
    }
    if (!policy_chose_) return;
    bool first = true;  // the round's costs once, every generator's acceptance
    for (size_t i = 0; i < gens_.size(); ++i) {
        if (in_round_[i] && gens_[i]->batch_chose_) {
            gens_[i]->tell(*policy_, first);
            first = false;
        }
    }
}

}  // namespace glm5next
