"""Judge backends: one small interface (:class:`~pytest_aimeasure.judge.backends.base.Backend`), three
implementations (anthropic, litellm, scripted). The SDK-backed ones import their SDK only when built."""
