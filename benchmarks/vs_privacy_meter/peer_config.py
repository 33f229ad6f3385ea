"""Print the peer's YAML config for one benchmark run: its configs/cifar10.yaml with the
benchmark's settings (CPU, the CNN, 10 models = 5 complementary pairs, SGD as miaudit's
defaults, batch 64, 2,000-image data set).

    python peer_config.py LOG_DIR DATA_DIR EPOCHS
"""

import sys

import yaml

log_dir, data_dir, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
print(yaml.safe_dump({
    "run": {"random_seed": 12345, "log_dir": log_dir, "time_log": True, "num_experiments": 1},
    "audit": {"privacy_game": "privacy_loss_model", "algorithm": "RMIA",
              # num_model_pairs = max(ceil(1 / 2), 4 + 1) = 5 pairs: 10 models, as miaudit's
              "num_ref_models": 4, "device": "cpu", "report_log": "report_rmia",
              "batch_size": 5000, "data_size": 2000},
    "train": {"model_name": "CNN", "device": "cpu", "batch_size": 64, "optimizer": "SGD",
              "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "epochs": epochs},
    "data": {"dataset": "cifar10", "data_dir": data_dir},
}, sort_keys=False))
