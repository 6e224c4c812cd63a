"""fpemu/_core"""
