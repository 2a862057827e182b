"""glm5next-server: the OpenAI-compatible HTTP server (llama-server's flags, endpoints and error shapes) around
the Python API of the top-level package.

    main.py       the command: load the -np slot models, then serve with uvicorn
    args.py       its command line (the model flags are ../model_args.py's, shared with glm5next-cli)
    config.py     ServerConfig: what the routes need besides the slots
    app.py        the FastAPI app: middlewares, /health, /metrics, and every surface's routes on one pipeline

One package per API surface; each has its routes, and its request schemas and replies where it has its own
(native's reply is completion_reply.py; vertex/ re-dispatches to the other routes), and none imports another:

    openai_chat/       OpenAI's /v1/chat/completions, /v1/completions, /v1/models
    native/            llama-server's own: /completion, /tokenize, /detokenize, /apply-template, /props, /slots,
                       POST /slots/{id}?action=save|restore|erase (--slot-save-path)
    anthropic/         Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), errors in its shape
    openai_responses/  OpenAI's Responses API (/v1/responses)
    vertex/            Google Vertex AI's prediction routes (AIP_MODE=PREDICTION)

The request pipeline every surface calls (parse -> template -> schedule -> generate -> reply):

    pipeline.py   RequestPipeline: a request's one way through the server
    schemas.py    the request bodies every surface becomes (OpenAI's chat request, and the sampling fields all
                  generations share; completions' own body is openai_chat/schemas.py)
    chat_bridge.py  another API's request as the chat request it is (Anthropic's and Responses' go the chat's way)
    request_defaults.py  --temp, --top-k, --top-p, --min-p, -n, --reasoning-*, -v: the requests' defaults
    templates.py  the chat template rendered in worker processes, with bounded memory and time
    builtin_templates.py  chat templates by llama-server's names (--no-jinja, files without one)
    prefill.py    assistant prefill: a final assistant message is continued
    tool_prompt.py  a chat's tools in the prompt
    structured.py response_format, json_schema, grammar and logit_bias as Model.generate takes them
    choices.py    several choices (n) and prompts in one request
    slots.py      the -np slots and the queue for them
    prompt_cache.py  --cache-ram: the slots' sequences kept in host memory, loaded back by later prompts
    slot_tasks.py what the slots run: llama-server's task params, GET /slots
    replies.py    the Reply base every surface's replies subclass: SSE framing, usage, timings, stop words
    completion_reply.py  llama-server's completion body (native /completion, and `__verbose` on OpenAI's)
    event_stream.py  a stream's events and the wait for a whole response
    reply_parts.py  a reply's reasoning, text and tool-call parts as they stream (Anthropic's blocks, Responses'
                  items)
    tool_replies.py  the reply's tool calls (OpenAI's tool_calls, read by the other surfaces' replies too)
    logprobs.py   token log-probabilities in response bodies
    token_text.py token ids as text, llama-server's way
    threads.py    work off the event loop

And around them: errors.py (OpenAI-shaped errors), auth.py (--api-key), body_limit.py (--max-body-mib), cors.py,
disconnect.py (requests whose client left are dropped), stopping.py (what requests meet while the server stops),
sleep.py (--sleep-idle-seconds), metrics.py (GET /metrics, llama-server's llamacpp:* names), build_info.py.

This package imports the top level (Model, chat, generate, prompt); the top level never imports it.
"""
