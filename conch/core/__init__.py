"""Protocol-agnostic core: tensors, requests, responses, errors and the in-process server API."""
