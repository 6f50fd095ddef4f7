"""The optional supervised format warm-up (stage 0, before RL): oracle-written episodes on the
synthetic web and a short fine-tune on them."""
