"""The project boots: settings load, migrations apply, the admin and API docs answer."""

import pytest


@pytest.mark.django_db
def test_home_and_admin_login_answer(client):
    assert client.get("/").status_code == 200
    assert client.get("/admin/login/").status_code == 200


@pytest.mark.django_db
def test_openapi_schema_is_served_offline(client, django_user_model):
    user = django_user_model.objects.create_user("reader", password="x" * 12)
    client.force_login(user)
    response = client.get("/api/v1/schema/")
    assert response.status_code == 200
    assert b"openapi" in response.content
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()
