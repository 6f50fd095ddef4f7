"""Running across servers securely (`mgrpo deploy`, mgrpo_actors/cli/deploy.py): what each role may do on NATS
(access.py), the deployment description (description.py), the servers' configurations with a user per
role (server_config.py), a development CA (certs.py), and provisioning a run's streams (provision.py)."""
