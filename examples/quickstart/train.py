"""A tiny training job for div: logistic regression on generated data, standard library only.

Run it with `div run --gpu cpu train.py::main --check 'metrics.accuracy>=0.8'`.
"""

import json
import math
import os
import random


def make_data(n, rng):
    """Points in the plane; the label is which side of a line they fall on, with some noise."""
    data = []
    for _ in range(n):
        x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
        label = 1 if 0.8 * x1 - 0.5 * x2 + 0.1 + rng.gauss(0, 0.15) > 0 else 0
        data.append(((x1, x2), label))
    return data


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def evaluate(w, b, data):
    loss, correct = 0.0, 0
    for (x1, x2), y in data:
        p = sigmoid(w[0] * x1 + w[1] * x2 + b)
        loss -= y * math.log(p + 1e-12) + (1 - y) * math.log(1 - p + 1e-12)
        correct += int((p >= 0.5) == (y == 1))
    return loss / len(data), correct / len(data)


def main():
    rng = random.Random(7)
    train, test = make_data(2000, rng), make_data(500, rng)
    # The learning rate: `LR` when set (`div run --env LR=0.1 …`, or the sweep example).
    w, b, lr = [0.0, 0.0], 0.0, float(os.environ.get("LR", "0.5"))
    telemetry_path = os.environ.get("DIVERGENT_TELEMETRY_PATH", "telemetry.jsonl")
    with open(telemetry_path, "a") as telemetry:
        for step in range(1, 301):
            batch = rng.sample(train, 64)
            gw, gb = [0.0, 0.0], 0.0
            for (x1, x2), y in batch:
                err = sigmoid(w[0] * x1 + w[1] * x2 + b) - y
                gw[0] += err * x1
                gw[1] += err * x2
                gb += err
            w = [w[0] - lr * gw[0] / len(batch), w[1] - lr * gw[1] / len(batch)]
            b -= lr * gb / len(batch)
            if step % 25 == 0:
                loss, _ = evaluate(w, b, train)
                telemetry.write(json.dumps({"step": step, "loss": round(loss, 4)}) + "\n")
                print(f"step {step:3d}  loss {loss:.4f}", flush=True)
    loss, accuracy = evaluate(w, b, test)
    print(f"test accuracy {accuracy:.3f}  loss {loss:.4f}", flush=True)
    result_path = os.environ.get("DIVERGENT_RESULT_PATH", "result.json")
    with open(result_path, "w") as f:
        json.dump({"metrics": {"accuracy": round(accuracy, 4), "loss": round(loss, 4)}}, f)


if __name__ == "__main__":
    main()
