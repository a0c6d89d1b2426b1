"""The bundled demo: a tiny tool-calling model, its tokenizer, training script, world and suites."""
