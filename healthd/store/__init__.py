"""Durable state in the state directory: its trust rule, lock, atomic files, history, acks and policy memory."""
