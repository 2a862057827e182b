"""glm5next-server: the OpenAI-compatible HTTP server (llama-server's flags, endpoints and error shapes) around
the Python API of the top-level package.

    main.py       the command: load the -np slot models, then serve with uvicorn
    args.py       its command line (the model flags are ../model_args.py's, shared with glm5next-cli)
    config.py     ServerConfig: what the routes need besides the slots
    app.py        the FastAPI app: routes and the path of one request through a slot
    native.py     llama-server's native endpoints (/completion, /tokenize, /props, /slots, ...)
    native_schemas.py, native_replies.py  their request bodies and the native completion's response
    anthropic.py  Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), errors in its shape
    anthropic_schemas.py, anthropic_replies.py  its request bodies (as chat requests) and its message and events
    anthropic_blocks.py  its content block
    anthropic_tools.py  its tools, tool_choice, tool_use and tool_result blocks as the chat's
    openai_responses.py  OpenAI's Responses API (/v1/responses)
    openai_responses_schemas.py, openai_responses_replies.py  its request body (as a chat request), its response
    openai_responses_tools.py  its function tools, tool_choice, function_call(_output) items as the chat's
    openai_responses_items.py  its input items
    chat_bridge.py  another API's request as the chat request it is (those two go the chat's way)
    reply_parts.py  a reply's reasoning, text and tool-call parts as they stream (Anthropic's blocks, Responses'
                  items)
    slot_tasks.py what the slots run: llama-server's task params, GET /slots
    request_defaults.py  --temp, --top-k, --top-p, --min-p, -n, --reasoning-*: the requests' defaults
    prefill.py    assistant prefill: a final assistant message is continued
    builtin_templates.py  chat templates by llama-server's names (--no-jinja, files without one)
    build_info.py build_info / system_fingerprint
    cors.py       CORS as llama-server answers it
    schemas.py    request bodies
    structured.py response_format, json_schema, grammar and logit_bias as Model.generate takes them
    responses.py  response bodies and their server-sent-event framing
    tool_prompt.py, tool_replies.py  a chat's tools in the prompt, and the reply's calls as OpenAI's tool_calls
    errors.py     OpenAI-shaped errors
    auth.py       --api-key
    body_limit.py --max-body-mib: request bodies bounded (413)
    templates.py  the chat template rendered in worker processes, with bounded memory and time
    slots.py      the -np slots and the queue for them
    prompt_cache.py  --cache-ram: the slots' sequences kept in host memory, loaded back by later prompts
    slot_files.py POST /slots/{id}?action=save|restore|erase (--slot-save-path)
    disconnect.py whether a request's client is still there (requests whose client left are dropped)
    stopping.py   what requests meet while the server stops (503s, the grace of running generations)
    metrics.py    GET /metrics (Prometheus, llama-server's llamacpp:* names)

This package imports the top level (Model, chat, generate, prompt); the top level never imports it.
"""
