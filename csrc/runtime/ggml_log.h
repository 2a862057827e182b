// ggml's log messages as this engine passes them on to stderr: errors, warnings and info, not debug.
#pragma once

namespace glm5next {

// Sets ggml's log callback (ggml_log_set) to one that writes ggml's messages to stderr as ggml's default does, but
// drops debug messages (and their continuations, GGML_LOG_LEVEL_CONT) unless the environment sets
// GLM5NEXT_GGML_DEBUG=1 when this is called. Why: ggml's default callback (ggml.c, ggml_log_callback_default) writes
// every level, flushing each line, and ggml-cuda logs at debug level on every graph it runs ("CUDA graph warmup
// complete", "CUDA Graph id N reused"), the backend scheduler whenever a split's inputs grow: on an H200 a placed
// model wrote such lines at every decode step (scripts/gpu_check.sh, stop 46). llama.cpp's tools print debug lines
// only when asked (-v, common/log.h). A library that sets its own callback later (llama_cpp's llama_log_set in the
// same process) replaces this one. Called when the native module loads.
void install_ggml_log_filter();

}  // namespace glm5next
