"""Frontends: the only code that knows a wire format. Each decodes into core types and encodes back."""
