"""rewind.configs"""
