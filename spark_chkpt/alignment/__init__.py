"""alignment"""
