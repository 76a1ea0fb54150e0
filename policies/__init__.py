"""rewind.policies"""
