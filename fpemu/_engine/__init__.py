"""fpemu/_engine"""
