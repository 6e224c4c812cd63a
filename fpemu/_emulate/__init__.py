"""fpemu/_emulate"""
