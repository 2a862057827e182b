"""glm5next-server: the OpenAI-compatible HTTP server (llama-server's flags, endpoints and error shapes) around
the Python API of the top-level package.

    main.py       the command: load the -np slot models, then serve with uvicorn
    args.py       its command line (the model flags are ../model_args.py's, shared with glm5next-cli)
    app.py        the FastAPI app: routes and the path of one request through a slot
    schemas.py    request bodies
    responses.py  response bodies and their server-sent-event framing
    errors.py     OpenAI-shaped errors
    auth.py       --api-key
    body_limit.py --max-body-mib: request bodies bounded (413)
    templates.py  the chat template rendered in worker processes, with bounded memory and time
    slots.py      the -np slots and the queue for them
    stopping.py   what requests meet while the server stops (503s, the grace of running generations)
    metrics.py    GET /metrics (Prometheus)

This package imports the top level (Model, chat, generate, prompt); the top level never imports it.
"""
