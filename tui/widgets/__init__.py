"""The dashboard's panels and screens; each reads the shared DashboardState and shows one part."""
