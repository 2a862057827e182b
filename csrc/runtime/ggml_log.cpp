#include "runtime/ggml_log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ggml.h"

namespace glm5next {

namespace {

bool g_keep_debug = false;
bool g_dropping = false;  // the last message was dropped: so are its continuations

void log_filtered(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level != GGML_LOG_LEVEL_CONT) g_dropping = level == GGML_LOG_LEVEL_DEBUG && !g_keep_debug;
    if (g_dropping) return;
    std::fputs(text, stderr);
    std::fflush(stderr);
}

}  // namespace

void install_ggml_log_filter() {
    const char * v = std::getenv("GLM5NEXT_GGML_DEBUG");
    g_keep_debug = v != nullptr && std::strcmp(v, "1") == 0;
    ggml_log_set(log_filtered, nullptr);
}

}  // namespace glm5next
