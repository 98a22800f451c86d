"""The naive baseline: one FastAPI/uvicorn process calling ONNX Runtime inside each request handler.

No batching, no worker pool, JSON only: the pattern production guides warn against, kept as the floor
a model server has to beat. ``NAIVE_REPOSITORY`` names a folder of ``<model>/1/model.onnx``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, HTTPException, Request

SESSIONS = {
    path.parent.parent.name: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for path in Path(os.environ["NAIVE_REPOSITORY"]).glob("*/1/model.onnx")
}
app = FastAPI()


@app.get("/v2/health/ready")
def ready() -> dict[str, bool]:
    return {"ready": True}


@app.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request) -> dict[str, Any]:
    if name not in SESSIONS:
        raise HTTPException(status_code=404, detail=f"unknown model '{name}'")
    tensor = (await request.json())["inputs"][0]
    batch = np.asarray(tensor["data"], dtype=np.float32).reshape(tensor["shape"])
    output = SESSIONS[name].run(["OUTPUT0"], {"INPUT0": batch})[0]
    return {
        "model_name": name,
        "outputs": [
            {
                "name": "OUTPUT0",
                "datatype": "FP32",
                "shape": list(output.shape),
                "data": output.ravel().tolist(),
            }
        ],
    }
