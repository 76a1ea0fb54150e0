"""rewind.envs"""
