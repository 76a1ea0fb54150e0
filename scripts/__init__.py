"""rewind.scripts"""
