"""fpemu/_ops"""
