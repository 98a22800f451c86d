"""KServe V2 / Triton gRPC: ``inference.GRPCInferenceService`` from tritonclient's generated modules."""
