"""What tools/bench/bench_vs_pytorch.py measures: (name, model, batch, kiln flags, torch spec).

The torch spec is the PyTorch twin's arguments (tools/bench/torch_peer.py), plus "optimizer" and "lr"
where a model trains with something other than plain SGD at lr 0.1; both sides read them (kiln as
--optimizer and --lr). Input sizes: MLP 784 (Fashion-MNIST rows), CNN 1x28x28, transformer
seq_len x d_model, resnet 3x32x32, gpt seq_len + 1 token ids."""

RESNET = ["--dataset", "synthetic", "--resnet_widths", "32,64,128,256", "--resnet_blocks", "2"]
GPT = ["--dataset", "synthetic", "--gpt_layers", "4", "--seq_len", "128", "--d_model", "256", "--num_heads", "4",
       "--ffn_dim", "1024", "--vocab", "256"]

FULL_CONFIGS = [
    ("mlp b1", "mlp", 1, ["--dataset", "fashion-mnist", "--mlp_hidden", "1024,1024"],
     {"input": 784, "hidden": [1024, 1024]}),
    ("mlp b64", "mlp", 64, ["--dataset", "fashion-mnist", "--mlp_hidden", "1024,1024"],
     {"input": 784, "hidden": [1024, 1024]}),
    ("mlp b256", "mlp", 256, ["--dataset", "fashion-mnist", "--mlp_hidden", "1024,1024"],
     {"input": 784, "hidden": [1024, 1024]}),
    ("cnn b64", "cnn", 64, ["--dataset", "fashion-mnist"], {"side": 28}),
    ("transformer b8", "transformer", 8,
     ["--dataset", "synthetic", "--seq_len", "128", "--d_model", "256", "--num_heads", "4", "--ffn_dim", "1024"],
     {"seq_len": 128, "d_model": 256, "num_heads": 4, "ffn_dim": 1024}),
    ("resnet b32", "resnet", 32, RESNET,
     {"side": 32, "widths": [32, 64, 128, 256], "blocks": 2, "optimizer": "momentum", "lr": 0.05}),
    ("gpt b16", "gpt", 16, GPT,
     {"layers": 4, "seq_len": 128, "d_model": 256, "num_heads": 4, "ffn_dim": 1024, "vocab": 256,
      "optimizer": "adam", "lr": 0.001}),
]
TINY_CONFIGS = [
    ("mlp b4", "mlp", 4, ["--dataset", "digits", "--mlp_hidden", "32"], {"input": 64, "hidden": [32]}),
    ("cnn b4", "cnn", 4, ["--dataset", "digits"], {"side": 8}),
    ("transformer b2", "transformer", 2,
     ["--dataset", "synthetic", "--seq_len", "8", "--d_model", "16", "--num_heads", "2", "--ffn_dim", "32"],
     {"seq_len": 8, "d_model": 16, "num_heads": 2, "ffn_dim": 32}),
    ("resnet b4", "resnet", 4, ["--dataset", "digits", "--resnet_widths", "4,8", "--resnet_blocks", "1"],
     {"side": 8, "channels": 1, "widths": [4, 8], "blocks": 1, "optimizer": "momentum", "lr": 0.05}),
    ("gpt b2", "gpt", 2,
     ["--dataset", "synthetic", "--gpt_layers", "2", "--seq_len", "8", "--d_model", "16", "--num_heads", "2",
      "--ffn_dim", "32", "--vocab", "16"],
     {"layers": 2, "seq_len": 8, "d_model": 16, "num_heads": 2, "ffn_dim": 32, "vocab": 16,
      "optimizer": "adam", "lr": 0.001}),
]
