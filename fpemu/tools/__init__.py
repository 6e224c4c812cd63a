"""fpemu/tools"""
